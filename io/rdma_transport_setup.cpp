// Setting an RDMA transport up: completion channel, CQ, QP, memory registration, and the QP state
// transitions RESET -> INIT (create) -> RTR -> RTS (connect). The data path is rdma_transport.cpp.

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "io/errc.hpp"
#include "io/log.hpp"
#include "io/rdma_transport.hpp"

namespace vessel::io {

namespace {

std::error_code verbs_error(int err) noexcept {
  return {err != 0 ? err : EIO, std::generic_category()};
}

spdlog::logger& logger() { return vessel::log::get("io"); }

}  // namespace


result<std::unique_ptr<rdma_transport>> rdma_transport::create(
    reactor& r, std::shared_ptr<rdma_device> device, buffer_pool& pool, transport_handler& handler,
    rdma_transport_config config) {
  if (!device || config.recv_depth == 0 || config.send_depth == 0 ||
      config.max_message < wire::prefix_bytes + wire::min_header_bytes ||
      !pool.class_for(config.max_message + recv_offset)) {
    return std::make_error_code(std::errc::invalid_argument);
  }
  std::unique_ptr<rdma_transport> t{
      new rdma_transport(r, std::move(device), pool, handler, config)};
  VESSEL_TRY(t->setup());
  return t;
}

rdma_transport::rdma_transport(reactor& r, std::shared_ptr<rdma_device> device, buffer_pool& pool,
                               transport_handler& handler, rdma_transport_config config)
    : reactor_(r),
      device_(std::move(device)),
      pool_(pool),
      handler_(handler),
      config_(config),
      pending_(config.send_queue_frames) {
  limits_.max_payload_bytes = config_.max_message;
}

result<void> rdma_transport::setup() {
  ibv_context* ctx = device_->context();
  channel_ = ::ibv_create_comp_channel(ctx);
  if (channel_ == nullptr) return verbs_error(errno);
  // Non-blocking, so that draining events after the reactor's POLL_ADD never blocks the reactor.
  const int fl = ::fcntl(channel_->fd, F_GETFL);
  if (fl < 0 || ::fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) != 0) return verbs_error(errno);

  const std::uint32_t recvs = config_.recv_depth + control_recvs;
  const int cqe = static_cast<int>(recvs + config_.send_depth);
  cq_ = ::ibv_create_cq(ctx, cqe, nullptr, channel_, 0);
  if (cq_ == nullptr) return verbs_error(errno);

  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 1;  // every SEND completes: its slot and payload block are released then
  init.cap.max_send_wr = config_.send_depth;
  init.cap.max_recv_wr = recvs;
  init.cap.max_send_sge = 2;  // header slot + payload
  init.cap.max_recv_sge = 1;
  qp_ = ::ibv_create_qp(device_->pd(), &init);
  if (qp_ == nullptr) return verbs_error(errno);

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = device_->port();
  attr.qp_access_flags = 0;  // two-sided only: the peer never reads or writes our memory
  if (int rc = ::ibv_modify_qp(qp_, &attr,
                               IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      rc != 0) {
    return verbs_error(rc);
  }

  for (const iovec& region : pool_.regions()) {
    ibv_mr* mr = ::ibv_reg_mr(device_->pd(), region.iov_base, region.iov_len, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) return verbs_error(errno);
    region_mrs_.push_back(mr);
  }
  const std::size_t slab_len = std::size_t{config_.send_depth} * slot_bytes;
  slab_.reset(new std::byte[slab_len]);
  slab_mr_ = ::ibv_reg_mr(device_->pd(), slab_.get(), slab_len, IBV_ACCESS_LOCAL_WRITE);
  if (slab_mr_ == nullptr) return verbs_error(errno);

  recv_blocks_.resize(recvs);
  recv_posted_.assign(recvs, false);
  for (auto& block : recv_blocks_) {
    block = pool_.try_acquire(config_.max_message + recv_offset);
    if (!block) return errc::pool_exhausted;
  }
  send_slots_.resize(config_.send_depth);
  free_slots_.reserve(config_.send_depth);
  for (std::uint32_t i = config_.send_depth; i > 0; --i) free_slots_.push_back(i - 1);

  std::random_device rd;  // a random first PSN, so stale packets of an old QP are not accepted
  local_.qp_num = qp_->qp_num;
  local_.psn = rd() & 0xFFFFFFu;
  local_.lid = device_->port_attr().lid;
  local_.port = device_->port();
  local_.mtu = static_cast<std::uint8_t>(device_->port_attr().active_mtu);
  std::memcpy(local_.gid.data(), device_->gid().raw, local_.gid.size());
  local_.recv_depth = config_.recv_depth;
  local_.max_message = config_.max_message;
  return outcome::success();
}

rdma_transport::~rdma_transport() {
  if (cq_op_.in_flight()) {
    logger().critical("rdma_transport destroyed with its completion poll in flight");
    std::abort();
  }
  if (qp_ != nullptr) ::ibv_destroy_qp(qp_);
  if (cq_ != nullptr) ::ibv_destroy_cq(cq_);
  if (channel_ != nullptr) ::ibv_destroy_comp_channel(channel_);
  if (slab_mr_ != nullptr) ::ibv_dereg_mr(slab_mr_);
  for (ibv_mr* mr : region_mrs_) ::ibv_dereg_mr(mr);
}

result<void> rdma_transport::connect(const rdma_qp_info& remote) {
  if (state_ != state::created) return std::make_error_code(std::errc::operation_in_progress);
  // On InfiniBand the LID routes; on RoCE the LID is 0 and only a GID (GRH) can.
  if (!device_->is_ethernet() && remote.lid == 0) return errc::handshake_failed;
  remote_ = remote;

  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = static_cast<ibv_mtu>(std::min(local_.mtu, remote.mtu));
  rtr.dest_qp_num = remote.qp_num;
  rtr.rq_psn = remote.psn;
  rtr.max_dest_rd_atomic = 1;
  rtr.min_rnr_timer = 12;  // 0.64 ms before a sender retries a receive-not-ready NAK
  rtr.ah_attr.dlid = remote.lid;
  rtr.ah_attr.sl = 0;
  rtr.ah_attr.src_path_bits = 0;
  rtr.ah_attr.port_num = device_->port();
  if (device_->is_ethernet() || remote.lid == 0) {
    rtr.ah_attr.is_global = 1;
    std::memcpy(rtr.ah_attr.grh.dgid.raw, remote.gid.data(), remote.gid.size());
    rtr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(device_->gid_index());
    rtr.ah_attr.grh.hop_limit = 1;
  }
  if (int rc = ::ibv_modify_qp(qp_, &rtr,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER);
      rc != 0) {
    return verbs_error(rc);
  }
  // Receives may be posted from INIT on; post them before RTS so no early SEND meets an empty RQ.
  for (std::uint32_t i = 0; i < recv_blocks_.size(); ++i) {
    VESSEL_TRY(post_recv(i));
  }

  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.timeout = 14;    // 4.096 us * 2^14 = 67 ms per transport retry
  rts.retry_cnt = 7;   // then the QP fails with RETRY_EXC_ERR: the peer is gone
  rts.rnr_retry = 7;   // infinite: credits should make RNR impossible; never fail on it
  rts.sq_psn = local_.psn;
  rts.max_rd_atomic = 1;
  if (int rc = ::ibv_modify_qp(qp_, &rts,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
      rc != 0) {
    return verbs_error(rc);
  }
  credits_ = remote.recv_depth;
  state_ = state::open;
  if (int rc = ::ibv_req_notify_cq(cq_, 0); rc != 0) return verbs_error(rc);
  reactor_.poll_add(cq_op_, channel_->fd, POLLIN);
  return outcome::success();
}

result<void> rdma_transport::post_recv(std::uint32_t index) {
  buffer& block = recv_blocks_[index];
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(block.data() + recv_offset);
  sge.length = config_.max_message;
  sge.lkey = region_mrs_[block.region_index()]->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = index;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ::ibv_post_recv(qp_, &wr, &bad); rc != 0) return verbs_error(rc);
  recv_posted_[index] = true;
  ++recvs_posted_;
  return outcome::success();
}

}  // namespace vessel::io
