#pragma once
// A reliable-connected (RC) queue pair as an io::transport: two-sided SENDs of whole vessel frames
// (`u32 header_len | header | payload`), received into pooled, registered blocks that are handed
// up without a copy. The CQ's completion channel fd is polled by the reactor (POLL_ADD), so verbs
// completions are processed on the reactor thread like any other io_uring completion.
//
// Flow control is by credits, as the InfiniBand RC model requires of two-sided traffic: a SEND
// that finds no posted receive is NAKed (RNR) and retried, stalling the QP. Each side grants the
// other `recv_depth` credits (one per posted receive); every SEND carries, in its immediate data,
// the credits its sender has returned by reposting receives since its last SEND. A side with
// credits to return and nothing to send posts a zero-length SEND_WITH_IMM, which lands in one of
// a few extra receives kept for such control messages. (The scheme of rsocket and of UCX's rc
// transport; rnr_retry = 7 stays as the safety net.)
//
// Memory: every pool region is registered once (ibv_reg_mr over buffer_pool::regions()), so a
// payload slice from that pool goes out as the second SGE of the SEND without a copy; a payload
// from elsewhere is copied into a pool block first (send_copy). Headers (< 300 bytes) are copied
// into a registered slab, one slot per send in flight.

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/buffer.hpp"
#include "io/buffer_pool.hpp"
#include "io/io_op.hpp"
#include "io/rdma_device.hpp"
#include "io/rdma_qp_info.hpp"
#include "io/reactor.hpp"
#include "io/transport.hpp"
#include "wire/frame_codec.hpp"

namespace vessel::io {

/// Sizes of one RDMA transport. Every key with its default.
struct rdma_transport_config {
  std::uint32_t recv_depth = 64;   ///< data receives kept posted = the peer's send credits
  std::uint32_t send_depth = 64;   ///< SENDs in flight at once (header slab slots)
  /// Largest frame (prefix + header + payload) the peer may send us. A receive needs a pool block
  /// of max_message + 4 bytes (the frame lands 4 bytes in, so that the Cap'n Proto header is
  /// 8-byte aligned): the default fills the 64 KiB class exactly.
  std::uint32_t max_message = 64 * 1024 - 4;
  std::size_t send_queue_frames = 1024;  ///< frames queued beyond credits; send() refuses beyond
};

/// An RC connection to one peer. Created on any thread; connect() and everything after on the
/// reactor thread. Destroy only when closed (after on_closed, or after the reactor stopped).
class rdma_transport final : public transport {
 public:
  /// Creates the completion channel, CQ and QP (moved to INIT), registers `pool`'s regions and a
  /// header slab, and takes recv_depth + 4 receive blocks from `pool`. The pool must outlive the
  /// transport. Errors: errc::pool_exhausted, std::errc::invalid_argument when the pool has no
  /// block of max_message + 4 bytes, a verbs errno otherwise.
  static result<std::unique_ptr<rdma_transport>> create(reactor& r,
                                                        std::shared_ptr<rdma_device> device,
                                                        buffer_pool& pool,
                                                        transport_handler& handler,
                                                        rdma_transport_config config = {});
  ~rdma_transport() override;
  rdma_transport(const rdma_transport&) = delete;
  rdma_transport& operator=(const rdma_transport&) = delete;

  /// This side's half of the connection setup: send it to the peer (exchange_qp_info over a
  /// bootstrap socket, or any channel the caller has).
  const rdma_qp_info& local_info() const noexcept { return local_; }

  /// Moves the QP through RTR to RTS towards `remote`, posts the receives and starts polling the
  /// completion channel. Reactor thread, once. Errors: errc::handshake_failed when `remote` is
  /// unusable (another port's link layer, MTU), the verbs errno of a failed transition.
  result<void> connect(const rdma_qp_info& remote);

  result<void> send(const wire::frame_header& header, buffer_slice payload) override;
  result<void> send_copy(const wire::frame_header& header,
                         std::span<const std::byte> payload) override;
  std::size_t queued_bytes() const noexcept override { return queued_bytes_; }
  /// Sends a goodbye (the peer sees errc::connection_closed), then moves the QP to ERROR, which
  /// flushes every posted work request; on_closed(errc::transport_closed) once all have come back.
  void close() noexcept override;
  const transport_stats& stats() const noexcept override { return stats_; }

  /// Credits this side holds: SENDs it may post before the peer returns some.
  std::uint32_t credits() const noexcept { return credits_; }

 private:
  enum class state { created, open, closing, closed };

  // Receives kept posted beyond the data window, for zero-length credit and goodbye messages.
  static constexpr std::uint32_t control_recvs = 4;
  // Immediate data of the goodbye message; a credit count never gets near it.
  static constexpr std::uint32_t bye_imm = 0xFFFFFFFFu;
  // Frames land this far into a receive block: the 4-byte prefix then ends on an 8-byte boundary,
  // where Cap'n Proto needs the header to start (DEPENDENCIES.md pitfall 15).
  static constexpr std::size_t recv_offset = 4;
  // Header slab slot: the prefix plus the largest header the encoder makes, rounded to a cache line.
  static constexpr std::size_t slot_bytes = 320;
  static_assert(slot_bytes >= wire::prefix_bytes + wire::max_encoded_header_bytes);
  // wr_id of a SEND: this bit plus the slot index; of a RECV: the receive slot index.
  static constexpr std::uint64_t send_bit = std::uint64_t{1} << 63;

  struct cq_op final : io_op {
    explicit cq_op(rdma_transport& t) : owner(t) {}
    void complete(int res, std::uint32_t flags) override;
    rdma_transport& owner;
  };
  struct pending_frame {
    wire::frame_header header;
    buffer_slice payload;
  };
  struct send_slot {
    buffer_slice payload;  // keeps the block alive until the SEND completes
    std::uint32_t bytes = 0;
    bool control = false;
  };

  rdma_transport(reactor& r, std::shared_ptr<rdma_device> device, buffer_pool& pool,
                 transport_handler& handler, rdma_transport_config config);
  result<void> setup();
  result<void> post_recv(std::uint32_t index);
  result<void> post_frame(const buffer_slice& payload);  // the frame encoder_ holds
  bool post_control(std::uint32_t imm) noexcept;
  const ibv_mr* region_of(const std::byte* p, std::size_t n) const noexcept;
  bool can_post_frame() const noexcept { return credits_ > 0 && !free_slots_.empty(); }
  void on_cq_event(int res);
  void handle(const ibv_wc& wc);
  void on_recv(std::uint32_t index, const ibv_wc& wc);
  void flush_pending();
  void refill();
  void begin_close(std::error_code why) noexcept;
  void finish_if_idle() noexcept;

  reactor& reactor_;
  std::shared_ptr<rdma_device> device_;
  buffer_pool& pool_;
  transport_handler& handler_;
  rdma_transport_config config_;
  state state_ = state::created;
  std::error_code close_reason_;
  bool bye_sent_ = false;

  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  std::vector<ibv_mr*> region_mrs_;  // one per pool region, in region order
  std::unique_ptr<std::byte[]> slab_;  // header slots of the SENDs in flight
  ibv_mr* slab_mr_ = nullptr;
  cq_op cq_op_{*this};

  rdma_qp_info local_;
  rdma_qp_info remote_;
  wire::frame_encoder encoder_;
  wire::decoder_limits limits_;

  std::vector<buffer> recv_blocks_;     // one per receive slot; empty while it waits for a block
  std::vector<bool> recv_posted_;
  std::uint32_t recvs_posted_ = 0;
  std::uint32_t recvs_missing_ = 0;     // slots waiting for a pool block (refill timer)
  timer_id refill_timer_ = 0;        // 0: none pending
  std::vector<send_slot> send_slots_;
  std::vector<std::uint32_t> free_slots_;
  std::uint32_t sends_posted_ = 0;

  std::uint32_t credits_ = 0;     // SENDs we may post
  std::uint32_t to_return_ = 0;   // credits owed to the peer (data receives reposted)
  std::uint32_t controls_in_flight_ = 0;

  std::vector<pending_frame> pending_;  // ring of frames waiting for a credit or a slot
  std::size_t pending_head_ = 0;
  std::size_t pending_size_ = 0;
  bool want_writable_ = false;
  std::size_t queued_bytes_ = 0;

  transport_stats stats_;
};

}  // namespace vessel::io
