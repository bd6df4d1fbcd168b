#include "io/rdma_transport.hpp"

#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "io/errc.hpp"
#include "io/log.hpp"
#include "wire/errc.hpp"

namespace vessel::io {
namespace {

constexpr int cq_batch = 32;

std::error_code verbs_error(int err) noexcept {
  return {err != 0 ? err : EIO, std::generic_category()};
}

spdlog::logger& logger() { return vessel::log::get("io"); }

}  // namespace

void rdma_transport::cq_op::complete(int res, std::uint32_t /*flags*/) { owner.on_cq_event(res); }

const ibv_mr* rdma_transport::region_of(const std::byte* p, std::size_t n) const noexcept {
  const auto regions = pool_.regions();
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const auto* base = static_cast<const std::byte*>(regions[i].iov_base);
    if (p >= base && p + n <= base + regions[i].iov_len) return region_mrs_[i];
  }
  return nullptr;
}

result<void> rdma_transport::send(const wire::frame_header& header, buffer_slice payload) {
  if (state_ != state::open) return errc::transport_closed;
  if (header.payload_len != payload.size()) return wire::errc::bad_field;
  if (!payload.empty() && region_of(payload.data(), payload.size()) == nullptr) {
    return send_copy(header, {payload.data(), payload.size()});  // not registered: copy once
  }
  // Encode now even if the frame must wait: a frame too large for the peer's receives is the
  // caller's error, to be returned here, not a reason to fail the link when its turn comes.
  const auto encoded = encoder_.encode(header, {payload.data(), payload.size()});
  if (!encoded) return encoded.error();
  if (encoder_.header_bytes().size() + payload.size() > remote_.max_message) {
    return std::make_error_code(std::errc::message_size);
  }
  if (pending_size_ == 0 && can_post_frame()) return post_frame(payload);
  if (pending_size_ == pending_.size()) {
    ++stats_.send_queue_full;
    want_writable_ = true;
    return errc::send_queue_full;
  }
  pending_[(pending_head_ + pending_size_) % pending_.size()] = {header, std::move(payload)};
  ++pending_size_;
  queued_bytes_ += header.payload_len;
  stats_.send_queue_high_water = std::max<std::uint64_t>(stats_.send_queue_high_water, queued_bytes_);
  return outcome::success();
}

result<void> rdma_transport::send_copy(const wire::frame_header& header,
                                       std::span<const std::byte> payload) {
  if (state_ != state::open) return errc::transport_closed;
  if (payload.empty()) return send(header, buffer_slice{});
  buffer block = pool_.try_acquire(payload.size());
  if (!block) return errc::pool_exhausted;
  std::memcpy(block.data(), payload.data(), payload.size());
  return send(header, std::move(block).slice(0, payload.size()));
}

result<void> rdma_transport::post_frame(const buffer_slice& payload) {
  const auto head = encoder_.header_bytes();  // the caller has just encoded this frame
  const std::size_t total = head.size() + payload.size();
  if (total > remote_.max_message) return std::make_error_code(std::errc::message_size);

  const std::uint32_t slot = free_slots_.back();
  std::byte* slot_mem = slab_.get() + std::size_t{slot} * slot_bytes;
  std::memcpy(slot_mem, head.data(), head.size());
  std::array<ibv_sge, 2> sge{};
  sge[0] = {reinterpret_cast<std::uintptr_t>(slot_mem), static_cast<std::uint32_t>(head.size()),
            slab_mr_->lkey};
  int nsge = 1;
  if (!payload.empty()) {
    const ibv_mr* mr = region_of(payload.data(), payload.size());
    if (mr == nullptr) return std::make_error_code(std::errc::bad_address);  // send() copies those
    sge[1] = {reinterpret_cast<std::uintptr_t>(payload.data()),
              static_cast<std::uint32_t>(payload.size()), mr->lkey};
    nsge = 2;
  }
  ibv_send_wr wr{};
  wr.wr_id = send_bit | slot;
  wr.sg_list = sge.data();
  wr.num_sge = nsge;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(to_return_);  // piggy-backed credits
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (int rc = ::ibv_post_send(qp_, &wr, &bad); rc != 0) return verbs_error(rc);
  free_slots_.pop_back();
  send_slots_[slot] = {payload, static_cast<std::uint32_t>(total), false};
  ++sends_posted_;
  --credits_;
  to_return_ = 0;
  queued_bytes_ += payload.size();
  ++stats_.frames_sent;
  stats_.bytes_sent += total;
  return outcome::success();
}

bool rdma_transport::post_control(std::uint32_t imm) noexcept {
  // Control messages land in the control receives, not the data window: no credit needed.
  // The goodbye may exceed the control window: it is the last message, and RNR retries cover it.
  if (free_slots_.empty() || (imm != bye_imm && controls_in_flight_ >= control_recvs)) return false;
  const std::uint32_t slot = free_slots_.back();
  ibv_send_wr wr{};
  wr.wr_id = send_bit | slot;
  wr.num_sge = 0;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(imm);
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (::ibv_post_send(qp_, &wr, &bad) != 0) return false;
  free_slots_.pop_back();
  send_slots_[slot] = {buffer_slice{}, 0, true};
  ++sends_posted_;
  ++controls_in_flight_;
  return true;
}

void rdma_transport::on_cq_event(int res) {
  if (res == -ECANCELED) {
    // Our own cancel (the QP is drained) or the reactor stopping, after which nothing can be
    // polled again: either way this is the end. Requests still posted die with the QP.
    begin_close(errc::transport_closed);
    state_ = state::closed;
    handler_.on_closed(close_reason_);  // last: the handler may destroy this transport
    return;
  }
  if (res < 0) {
    begin_close(error_from_errno(res));
  } else {
    // Take every event the channel holds and acknowledge them (ibv_destroy_cq waits for the acks),
    // re-arm the notification, THEN poll: a completion arriving between the poll and the re-arm
    // would otherwise raise no event.
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    unsigned events = 0;
    while (::ibv_get_cq_event(channel_, &ev_cq, &ev_ctx) == 0) ++events;
    if (events > 0) ::ibv_ack_cq_events(cq_, events);
    if (state_ != state::closed) ::ibv_req_notify_cq(cq_, 0);
    std::array<ibv_wc, cq_batch> wcs{};
    for (;;) {
      const int n = ::ibv_poll_cq(cq_, cq_batch, wcs.data());
      if (n < 0) {
        begin_close(errc::work_request_failed);
        break;
      }
      for (int i = 0; i < n; ++i) handle(wcs[static_cast<std::size_t>(i)]);
      if (n < cq_batch) break;
    }
    if (state_ == state::open) {
      flush_pending();
      // Return credits explicitly once half the window is owed and no SEND took them along.
      if (to_return_ >= std::max(1u, config_.recv_depth / 2) && post_control(to_return_)) {
        to_return_ = 0;
      }
    }
    if (state_ == state::open || (state_ == state::closing && (sends_posted_ + recvs_posted_) > 0)) {
      reactor_.poll_add(cq_op_, channel_->fd, POLLIN);
    }
  }
  finish_if_idle();
}

void rdma_transport::handle(const ibv_wc& wc) {
  const bool is_send = (wc.wr_id & send_bit) != 0;
  const auto index = static_cast<std::uint32_t>(wc.wr_id & ~send_bit);
  if (is_send) {
    send_slot& slot = send_slots_[index];
    if (slot.control) {
      --controls_in_flight_;
    } else {
      queued_bytes_ -= slot.payload.size();
    }
    slot.payload = buffer_slice{};  // the NIC is done with the block
    free_slots_.push_back(index);
    --sends_posted_;
  } else {
    recv_posted_[index] = false;
    --recvs_posted_;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    // Flushes are the expected end of every posted request once the QP is in ERROR.
    if (!(state_ == state::closing && wc.status == IBV_WC_WR_FLUSH_ERR)) {
      logger().warn("rdma {} completion failed: {}", is_send ? "send" : "recv",
                    ::ibv_wc_status_str(wc.status));
      begin_close(errc::work_request_failed);
    }
    return;
  }
  if (is_send) {
    if (state_ == state::closing && bye_sent_ && sends_posted_ == 0 && qp_ != nullptr) {
      ibv_qp_attr attr{};  // the goodbye is out: flush everything else
      attr.qp_state = IBV_QPS_ERR;
      ::ibv_modify_qp(qp_, &attr, IBV_QP_STATE);
    }
    return;
  }
  on_recv(index, wc);
}

void rdma_transport::on_recv(std::uint32_t index, const ibv_wc& wc) {
  const std::uint32_t imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0 ? ntohl(wc.imm_data) : 0;
  const bool control = wc.byte_len == 0;
  if (control && imm == bye_imm) {
    begin_close(errc::connection_closed);
    return;
  }
  credits_ += imm;
  if (!control) {
    buffer& block = recv_blocks_[index];
    const std::byte* frame = block.data() + recv_offset;
    std::uint32_t header_len = 0;
    for (std::size_t i = 0; i < wire::prefix_bytes; ++i) {
      header_len |= std::uint32_t{static_cast<std::uint8_t>(frame[i])} << (8 * i);
    }
    const std::size_t header_at = recv_offset + wire::prefix_bytes;
    if (std::size_t{header_len} + wire::prefix_bytes > wc.byte_len) {
      begin_close(errc::bad_frame);
      return;
    }
    const auto header = wire::decode_header({block.data() + header_at, header_len}, limits_);
    if (!header || wire::prefix_bytes + header_len + header.value().payload_len != wc.byte_len) {
      logger().warn("rdma: bad frame ({})", header ? "length mismatch" : header.error().message());
      begin_close(errc::bad_frame);
      return;
    }
    const std::size_t payload_at = header_at + header_len;
    const std::size_t payload_len = header.value().payload_len;
    ++stats_.frames_received;
    stats_.bytes_received += wc.byte_len;
    {
      const buffer_slice owner = block.slice(payload_at, payload_len);
      handler_.on_frame(header.value(), {block.data() + payload_at, payload_len}, owner);
    }
    // The handler may have kept the payload: then the block is theirs and the slot needs a new one.
    // Count 1 means only we hold it and nobody can copy it any more. Whoever dropped the last other
    // handle did so after reading; the NIC writes the block again only after ibv_post_recv, whose
    // doorbell is preceded by a device barrier (rdma-core's udma_to_device_barrier).
    if (block.use_count() > 1) block = pool_.try_acquire(config_.max_message + recv_offset);
  }
  if (state_ != state::open) return;
  if (!recv_blocks_[index]) {
    ++recvs_missing_;  // pool exhausted: the window shrinks until refill() finds blocks
    refill();
    return;
  }
  if (!post_recv(index)) {
    begin_close(errc::work_request_failed);
    return;
  }
  if (!control) ++to_return_;
}

void rdma_transport::refill() {
  if (recvs_missing_ == 0 || state_ != state::open) return;
  for (std::uint32_t i = 0; i < recv_blocks_.size() && recvs_missing_ > 0; ++i) {
    if (recv_blocks_[i] || recv_posted_[i]) continue;
    recv_blocks_[i] = pool_.try_acquire(config_.max_message + recv_offset);
    if (!recv_blocks_[i]) break;
    if (!post_recv(i)) {
      begin_close(errc::work_request_failed);
      return;
    }
    --recvs_missing_;
    ++to_return_;
  }
  if (recvs_missing_ > 0 && refill_timer_ == 0) {
    refill_timer_ = reactor_.add_timer(std::chrono::milliseconds{1}, [this] {
      refill_timer_ = 0;
      refill();
    });
  }
}

void rdma_transport::flush_pending() {
  while (pending_size_ > 0 && can_post_frame() && state_ == state::open) {
    pending_frame& f = pending_[pending_head_];
    queued_bytes_ -= f.header.payload_len;
    auto posted = encoder_.encode(f.header, {f.payload.data(), f.payload.size()})
                      ? post_frame(f.payload)
                      : result<void>{errc::bad_frame};
    f.payload = buffer_slice{};
    pending_head_ = (pending_head_ + 1) % pending_.size();
    --pending_size_;
    if (!posted) {
      begin_close(posted.error());
      return;
    }
  }
  if (want_writable_ && pending_size_ < pending_.size()) {
    want_writable_ = false;
    handler_.on_writable();
  }
}

void rdma_transport::close() noexcept {
  if (state_ == state::created) {
    state_ = state::closed;
    handler_.on_closed(errc::transport_closed);
    return;
  }
  if (state_ != state::open) return;
  begin_close(errc::transport_closed);
}

void rdma_transport::begin_close(std::error_code why) noexcept {
  if (state_ != state::open) return;
  state_ = state::closing;
  close_reason_ = why;
  if (refill_timer_ != 0) {
    reactor_.cancel_timer(refill_timer_);
    refill_timer_ = 0;
  }
  for (; pending_size_ > 0; --pending_size_) {
    queued_bytes_ -= pending_[pending_head_].header.payload_len;
    pending_[pending_head_].payload = buffer_slice{};
    pending_head_ = (pending_head_ + 1) % pending_.size();
  }
  want_writable_ = false;
  // A local close tells the peer, so that it need not wait for a transport timeout; the QP goes to
  // ERROR when the goodbye has completed. Any other end (a failed request, the peer's goodbye)
  // moves it to ERROR at once: its SENDs would fail anyway.
  bye_sent_ = why == errc::transport_closed && post_control(bye_imm);
  if (!bye_sent_) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ::ibv_modify_qp(qp_, &attr, IBV_QP_STATE);
  }
}

void rdma_transport::finish_if_idle() noexcept {
  if (state_ != state::closing || sends_posted_ + recvs_posted_ > 0) return;
  if (cq_op_.in_flight()) {
    reactor_.cancel(cq_op_);
    return;
  }
  state_ = state::closed;
  handler_.on_closed(close_reason_);  // last: the handler may destroy this transport
}

}  // namespace vessel::io
