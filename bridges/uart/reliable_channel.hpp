#pragma once
// The reliable mode of a UART link on the host (docs/uart.md §3), byte-compatible with the board
// library's vessel_serial.c: go-back-N with cumulative acks, sequence numbers mod 64, a window of
// 1..8 frames, a SYN with a session id that starts each run's stream, SYN requests from a receiver
// without state, a retransmit timeout derived from the baud rate and the frame's length. A pure
// state machine: link payloads in, link payloads out through a sink, time passed in by the caller.
//
// One addition the board does not make, compatible with it: fast retransmit. A board receiver
// answers every DATA after a gap with ACK(expected), which acks nothing new. Such an ack while
// frames are in flight means the oldest was lost (an in-order DATA always moves the ack on), so
// this sender resends the window at once instead of waiting out the timeout, once per base. The
// receiving side sees only what a timeout would have sent. On a line losing 15% of frames this
// turns most stalls of one retransmit timeout into one round trip.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "bridges/uart/link_header.hpp"
#include "wire/result.hpp"
#include "wire/serial_timing.hpp"

namespace vessel::bridges::uart {

/// How a reliable_channel times and sizes its stream. Every key with its default.
struct reliable_channel_config {
  std::uint32_t baud = 115200;                          ///< line rate, for the retransmit timeout
  unsigned bits_per_char = wire::bits_per_char_8n1;     ///< 10 for 8N1
  unsigned window = 4;       ///< frames sent and not yet acked, 1..8 (the board's VSL_WINDOW is 4)
  unsigned peer_window = 4;  ///< the peer's window: how many largest frames may precede its ack
  /// The timeout's constant part: USB-serial adapter latency and scheduling (docs/uart.md). A pty
  /// has no adapter; tests on one may lower it.
  std::chrono::nanoseconds rto_floor = wire::serial_timeout_floor;
  bool fast_retransmit = true;  ///< resend on a duplicate ack (see the file comment)
  std::uint8_t session = 0;     ///< this run's id: must differ from the previous run's
};

/// Counters of a channel (the same names as the board's vsl_stats).
struct reliable_channel_stats {
  std::uint64_t sent_reliable = 0;
  std::uint64_t sent_unreliable = 0;
  std::uint64_t retransmitted_frames = 0;  ///< frames sent again (timeout or fast retransmit)
  std::uint64_t timeouts = 0;              ///< retransmit timer expiries
  std::uint64_t fast_retransmits = 0;      ///< windows resent on duplicate acks
  std::uint64_t delivered_reliable = 0;    ///< DATA delivered, each exactly once
  std::uint64_t delivered_unreliable = 0;
  std::uint64_t duplicates = 0;      ///< DATA/SYN seen before: dropped, acked again
  std::uint64_t out_of_order = 0;    ///< DATA after a gap: dropped, acked with what is expected
  std::uint64_t unsynced_drops = 0;  ///< DATA before any SYN of the peer: a SYN request sent
  std::uint64_t syn_requests = 0;    ///< the peer's SYN requests answered with a SYN
  std::uint64_t acks_sent = 0;
  std::uint64_t bad_header = 0;  ///< payloads under 2 bytes, SYN without session, stale acks
  std::uint64_t bad_check = 0;   ///< link check failed: a bogus frame the frame CRC let through
};

/// Where a channel's output goes; called synchronously from the channel's calls.
class channel_sink {
 public:
  virtual ~channel_sink() = default;
  /// One link payload (header, check, body) to send as one serial frame. Valid during the call.
  /// A frame the line cannot take now may be dropped: reliable frames are resent on timeout.
  virtual void write_link_payload(std::span<const std::byte> payload) = 0;
  /// One message of the peer: exactly once, in order, for reliable ones. Valid during the call;
  /// the callee may call send() (its frames then follow the ack of this one).
  virtual void deliver(std::span<const std::byte> message, bool reliable) = 0;
};

/// One side of a reliable UART stream. Not thread-safe: one thread (the reactor's) drives it.
class reliable_channel {
 public:
  using clock = std::chrono::steady_clock;

  /// Throws std::invalid_argument when window is not 1..8 or baud is 0.
  reliable_channel(reliable_channel_config config, channel_sink& sink);

  /// (Re)starts both directions: forgets the peer's stream and every unacked frame, takes
  /// `session` as this run's id and sends the SYN that opens this side's stream.
  void start(std::uint8_t session, clock::time_point now);

  /// Sends `message` reliably. errc::window_full when `window` frames await acks (backpressure,
  /// nothing dropped), errc::message_too_large above 251 bytes, errc::not_started before start().
  result<void> send(std::span<const std::byte> message, clock::time_point now);
  /// Sends `message` once, unacked.
  result<void> send_unreliable(std::span<const std::byte> message);

  /// A frame payload from the line.
  void on_link_payload(std::span<const std::byte> payload, clock::time_point now);
  /// Lets time pass: resends the window when the oldest frame's timeout has expired.
  void poll(clock::time_point now);

  /// When poll() has work to do, or nullopt while nothing is in flight.
  std::optional<clock::time_point> retransmit_deadline() const noexcept;
  /// Messages send() accepts before the window is full.
  unsigned send_room() const noexcept { return config_.window - count_; }
  unsigned in_flight() const noexcept { return count_; }
  /// Whether the peer's SYN was seen (its stream is being delivered).
  bool peer_synced() const noexcept { return rx_synced_; }
  bool started() const noexcept { return started_; }
  const reliable_channel_stats& stats() const noexcept { return stats_; }
  const reliable_channel_config& config() const noexcept { return config_; }
  /// The timeout of a frame of `frame_bytes` bytes on the line, as this channel computes it.
  std::chrono::nanoseconds rto(std::size_t frame_bytes) const noexcept;

 private:
  struct slot {
    std::uint16_t len = 0;  // link payload bytes
    std::array<std::byte, wire::serial_max_payload> bytes{};
  };

  result<void> send_windowed(link_type type, std::span<const std::byte> body, clock::time_point now);
  void send_control(link_type type, unsigned seq, std::span<const std::byte> body);
  void send_ack();
  void on_ack(unsigned next, clock::time_point now);
  void resend_window();
  std::chrono::nanoseconds rto_of_oldest() const noexcept;
  slot& slot_at(unsigned i) noexcept { return slots_[(first_ + i) % config_.window]; }

  reliable_channel_config config_;
  channel_sink& sink_;
  reliable_channel_stats stats_;
  std::array<slot, link_max_window> slots_;
  clock::time_point rto_deadline_{};
  bool started_ = false;
  unsigned first_ = 0;  // slot index of the oldest unacked frame
  unsigned count_ = 0;  // unacked frames
  unsigned base_ = 0;   // seq of the oldest unacked frame
  unsigned next_ = 0;   // seq of the next frame sent
  bool fast_resent_ = false;    // the window was fast-resent for this base_
  bool syn_acked_ = false;      // the SYN of start() was acked
  bool resync_pending_ = false; // a SYN answering a SYN request awaits an ack
  std::uint8_t session_ = 0;
  bool rx_synced_ = false;
  std::uint8_t rx_session_ = 0;
  unsigned rx_expected_ = 0;
};

}  // namespace vessel::bridges::uart
