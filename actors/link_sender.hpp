#pragma once
// The sending half of a link's reliability and flow control, as a pure state machine: no
// sockets, no CAF, no clock. The link that owns a connection drives it on its reactor thread:
// submit() frames, drain next_transmit() into io::transport::send, feed it the peer's acks and
// credit grants, and call resume() after a reconnect.
//
// Every sequenced frame (data, collective, device) lives in one ring, in seq order, from
// submit() until a cumulative ack covers it:
//
//   acked | unacked (given to the owner) | queued (waiting for credit or window) | free
//         ^ acked_seq + 1               ^ next_tx_seq                  ^ next_seq
//
// Keeping a frame = keeping its io::buffer_slice (a reference count, no copy). The ring is sized
// once at construction, so nothing on the per-frame path allocates.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/buffer.hpp"
#include "wire/frame_header.hpp"
#include "wire/result.hpp"

namespace vessel::actors {

/// Bounds of one link's send side.
struct link_sender_config {
  /// Frames sent but not yet acked, at most. Must exceed the receiver's ack_every_frames, or the
  /// sender waits on the receiver's delayed ack every window.
  std::size_t max_unacked_frames = 1024;
  /// Frames that may wait for credit or window on top of a full unacked window: submit()
  /// pushes back once unacked + queued frames reach max_unacked_frames + max_queued_frames.
  std::size_t max_queued_frames = 1024;
  /// Payload bytes held (queued + unacked), at most: the memory a slow receiver can cost us.
  std::size_t max_buffered_bytes = 16u << 20;
  /// Credit before the first grant; equals the receiver's window_bytes (both sides know it
  /// from the configuration, so the first frames need no round trip).
  std::uint64_t initial_credit = 4u << 20;
  /// A grant that takes credit past this is a broken peer (no receiver has a larger window).
  std::uint64_t max_credit = std::uint64_t{1} << 40;
  /// Credit each data message costs on top of its bytes (link_credit.hpp); the receiver's
  /// link_receiver_config must say the same. Links use message_credit_overhead.
  std::uint64_t message_overhead = 0;
};

/// A frame the owner transmits: its header (seq set) and a handle on its payload.
struct outgoing_frame {
  wire::frame_header header;
  io::buffer_slice payload;
  io::buffer_slice more;  ///< the payload's second part, if it comes in two (transport::send_parts)
  std::uint64_t credit = 0;  ///< what sending it costs (link_credit.hpp: frame_credit)
  std::size_t bytes() const noexcept { return payload.size() + more.size(); }
};

/// What became of a submitted frame.
enum class submit_outcome : std::uint8_t {
  sendable,  ///< credit and window allow it: next_transmit() hands it out now
  queued,    ///< kept until credit or window frees up (a credit stall if it is the first)
};

/// Send-side counters (monotonic).
struct link_sender_stats {
  std::uint64_t frames_sent = 0;    ///< frames handed out, first transmissions and resends
  std::uint64_t bytes_sent = 0;     ///< their payload bytes
  std::uint64_t retransmits = 0;    ///< frames handed out again after a resume()
  std::uint64_t credit_stalls = 0;  ///< times a frame had to wait for credit or window
  std::uint64_t would_block = 0;    ///< submit() calls pushed back (queue bound reached)
  std::uint64_t frames_acked = 0;   ///< frames released by acks (or by a resume)
};

/// Sequence numbers, unacked window, credit and bounded queueing of one link direction.
/// Single-threaded: owned by the reactor thread of its connection.
class link_sender {
 public:
  /// Sizes the ring for max_unacked_frames + max_queued_frames (the only allocation).
  explicit link_sender(const link_sender_config& config);

  /// Assigns the next seq to `header` and keeps (header, payload) until acked.
  /// Errors: link_not_reliable for a control frame; link_frame_too_large when the payload alone
  /// exceeds max_buffered_bytes; link_would_block when the queue is full (bytes or frames): the
  /// caller holds on to the frame and retries once writable() says there is room.
  result<submit_outcome> submit(wire::frame_header header, io::buffer_slice payload,
                                io::buffer_slice more = {});

  /// The next frame credit and window allow, or nullptr. The frame stays owned by the sender
  /// (the pointer is valid until the next on_ack/resume/submit); the owner copies the header
  /// and slice handle into its send. Each call counts the frame as sent.
  const outgoing_frame* next_transmit() noexcept;

  /// The peer received every frame up to `cumulative_seq`: drops them (releasing buffers).
  /// Returns the frames released. A seq never sent is link_ack_beyond_sent; an older ack than
  /// one already seen is harmless and ignored.
  result<std::size_t> on_ack(std::uint64_t cumulative_seq);

  /// The peer grants `bytes` more credit (payload bytes, plus message_overhead per message).
  /// link_credit_overflow past max_credit.
  result<void> on_credit(std::uint64_t bytes);

  /// After a reconnect: the peer's hello says it has every frame up to `peer_last_seq_seen`.
  /// Those are dropped; every later one is handed out again, in order, counted as retransmits.
  /// Credit restarts at zero: grants in flight on the dead connection are lost, so the receiver
  /// sends one fresh grant after its hello (link_receiver::on_reconnect) and both sides agree
  /// again. link_resume_out_of_range if the seq is past what was sent or before what was acked.
  result<void> resume(std::uint64_t peer_last_seq_seen);

  /// The link is down for good (this incarnation of the peer never resumes): releases every
  /// payload still kept for a resend, so that memory lent to a send (io::borrowed_memory) goes
  /// back to its lender now. Sequence state stays; a restarted peer gets a new sender.
  void drop_payloads() noexcept;

  /// True when a frame of `payload_bytes` would be accepted by submit() now.
  bool writable(std::size_t payload_bytes) const noexcept;

  /// True once after a submit() was pushed back and room has come back since (then clears):
  /// the owner polls it after on_ack to wake a blocked caller.
  bool take_writable_signal() noexcept;

  std::uint64_t last_seq_assigned() const noexcept { return next_seq_ - 1; }
  std::uint64_t acked_seq() const noexcept { return acked_seq_; }
  std::uint64_t credit() const noexcept { return credit_; }
  std::size_t unacked_frames() const noexcept { return next_tx_seq_ - acked_seq_ - 1; }
  std::size_t queued_frames() const noexcept { return next_seq_ - next_tx_seq_; }
  /// Payload bytes held (queued + unacked): never above max_buffered_bytes.
  std::size_t buffered_bytes() const noexcept { return buffered_bytes_; }
  const link_sender_stats& stats() const noexcept { return stats_; }
  const link_sender_config& config() const noexcept { return config_; }

 private:
  outgoing_frame& slot(std::uint64_t seq) noexcept { return ring_[seq % ring_.size()]; }
  bool can_release(const outgoing_frame& f) const noexcept;

  link_sender_config config_;
  std::vector<outgoing_frame> ring_;
  std::uint64_t next_seq_ = 1;      ///< seq the next submit() gets (0 means "no seq")
  std::uint64_t next_tx_seq_ = 1;   ///< next seq to hand out
  std::uint64_t acked_seq_ = 0;     ///< every seq <= this is acked
  std::uint64_t highest_sent_ = 0;  ///< highest seq ever handed out (resends are below it)
  std::uint64_t credit_;
  std::size_t buffered_bytes_ = 0;  ///< payload bytes of unacked + queued frames
  std::uint64_t queued_credit_ = 0;  ///< credit the queued frames (not yet handed out) need
  bool stalled_ = false;            ///< a frame waits on credit/window (one stall per episode)
  bool blocked_ = false;            ///< a submit() was pushed back and not yet told of room
  std::size_t blocked_bytes_ = 0;   ///< the size that was pushed back
  bool writable_signal_ = false;
  link_sender_stats stats_;
};

}  // namespace vessel::actors
