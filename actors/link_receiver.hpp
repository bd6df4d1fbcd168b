#pragma once
// The receiving half of a link's reliability and flow control, as a pure state machine: no
// sockets, no CAF; time is passed in. It checks each sequenced frame's seq and credit, says
// whether to deliver or drop it, and tells its owner when an ack and a credit grant are due.
//
// Acks are coalesced: one every ack_every_frames frames or ack_every_bytes bytes, or ack_delay
// after the first unacked frame, whichever comes first. Acks are cumulative, so one ack covers
// every frame before it and skipping the others loses nothing; but each ack is a frame of its
// own (header encode, a share of a send, a wakeup of the peer's reactor), and one per data frame
// would double the frame rate of a small-message stream. The delay bounds how long the peer's
// unacked window stays full when the stream pauses (TCP's delayed ack, RFC 1122 4.2.3.2).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "wire/frame_header.hpp"
#include "wire/result.hpp"

namespace vessel::actors {

/// Time on the owner's monotonic clock, since any fixed epoch.
using link_time = std::chrono::nanoseconds;

/// Receive-side policy of one link.
struct link_receiver_config {
  /// Credit the peer may have in flight or unconsumed here (payload bytes plus message_overhead
  /// per message); equals the sender's initial_credit.
  std::uint64_t window_bytes = 4u << 20;
  /// Credit each data message costs on top of its bytes; the sender's link_sender_config must
  /// say the same (link_credit.hpp). Links use message_credit_overhead.
  std::uint64_t message_overhead = 0;
  /// Ack after this many frames ...
  std::uint32_t ack_every_frames = 32;
  /// ... or this many payload bytes ...
  std::uint64_t ack_every_bytes = 256u << 10;
  /// ... or this long after the first frame not yet acked.
  link_time ack_delay = std::chrono::microseconds{200};
};

/// What to do with a received sequenced frame.
enum class receive_verdict : std::uint8_t {
  deliver,    ///< the next frame in order: hand it to the app
  duplicate,  ///< already delivered (a resend that crossed an ack): drop it
};

/// Receive-side counters (monotonic).
struct link_receiver_stats {
  std::uint64_t frames_received = 0;     ///< frames delivered
  std::uint64_t bytes_received = 0;      ///< their payload bytes
  std::uint64_t duplicates_dropped = 0;  ///< frames dropped as already delivered
  std::uint64_t acks_sent = 0;           ///< acks the owner was told to send
  std::uint64_t credits_granted = 0;     ///< grants the owner was told to send
  std::uint64_t bytes_granted = 0;       ///< their bytes
};

/// Sequence check, ack coalescing and credit grants of one link direction.
/// Single-threaded: owned by the reactor thread of its connection.
class link_receiver {
 public:
  explicit link_receiver(const link_receiver_config& config);

  /// One sequenced frame (data, collective, device) arrived at `now`.
  /// Errors: link_not_reliable for a control frame or seq 0; link_sequence_gap when the seq
  /// skips ahead (TCP and shm never reorder, so a gap means the peer is broken);
  /// link_credit_exceeded when its payload is more than the peer was granted.
  result<receive_verdict> on_frame(const wire::frame_header& header, link_time now);

  /// An ack to send now, if one is due (by count, bytes or delay); the owner sends it.
  std::optional<wire::ack_fields> poll_ack(link_time now) noexcept;

  /// Makes the next poll_ack() answer at once, whatever the count, bytes and delay say: the owner
  /// just completed a large message, whose sender may be waiting for that ack to return (a send
  /// that lent its memory, comm's send_lent) rather than streaming more frames.
  void ack_soon() noexcept { ack_soon_ = unacked_frames_ > 0; }

  /// When poll_ack() will next have an ack by delay (the owner arms a timer for it).
  std::optional<link_time> ack_deadline() const noexcept;

  /// The app consumed `bytes` of delivered payload. Returns a grant to send once consumption
  /// since the last grant reaches half the window: sooner means many tiny credit frames (the
  /// silly-window syndrome, RFC 813), later means the sender idles while the grant travels; at
  /// half, the sender still has half a window in flight when the grant arrives.
  /// link_consumed_beyond_received if more than was delivered and not yet consumed.
  result<std::optional<wire::credit_fields>> on_consumed(std::uint64_t bytes);

  /// After a reconnect: the grant to send right after the hello. It restores the peer's credit
  /// (which link_sender::resume zeroes) to the window minus what the app still holds, since
  /// grants in flight on the dead connection were lost. Also forgets a pending ack (the hello's
  /// last_seq_seen carries it).
  wire::credit_fields on_reconnect() noexcept;

  /// True while frames wait for an ack: on_frame() then ignores its `now` (the first of them
  /// started the delayed-ack timer).
  bool acks_owed() const noexcept { return unacked_frames_ > 0; }
  /// Highest seq delivered in order: the hello's last_seq_seen.
  std::uint64_t last_seq_seen() const noexcept { return last_seq_; }
  /// Payload bytes delivered and not yet consumed by the app.
  std::uint64_t held_bytes() const noexcept { return held_; }
  /// Payload bytes the peer may still send before a grant.
  std::uint64_t allowance() const noexcept { return allowance_; }
  const link_receiver_stats& stats() const noexcept { return stats_; }

 private:
  link_receiver_config config_;
  std::uint64_t last_seq_ = 0;
  std::uint64_t allowance_;  ///< window - held - bytes the peer has in flight
  std::uint64_t held_ = 0;
  std::uint64_t consumed_ungranted_ = 0;
  std::uint32_t unacked_frames_ = 0;  ///< delivered since the last ack
  std::uint64_t unacked_bytes_ = 0;
  link_time first_unacked_at_{};  ///< arrival of the oldest frame not yet acked
  bool ack_soon_ = false;         ///< ack_soon(): the next poll_ack() is due
  link_receiver_stats stats_;
};

}  // namespace vessel::actors
