#pragma once
// The host side of a UART board, run on a reactor: opens the port through io's serial transport,
// speaks the serial frame format with the link header of docs/uart.md (optionally the reliable
// mode, reliable_channel.hpp), matches replies to calls, delivers unsolicited frames (telemetry)
// to subscribers, and rides out unplugs: it reports them, reopens the port with backoff when the
// path is back, and resends or fails the calls in flight, never dropping one silently.
//
// The device actor (CAF) is a thin shell over this engine: it owns a uart_link on its node's
// reactor, forwards calls with reactor::dispatch and turns the callbacks into messages. The
// per-frame work (framing, acks, retransmits, matching) stays here on the reactor thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "bridges/uart/command.hpp"
#include "bridges/uart/reliable_channel.hpp"
#include "io/backoff.hpp"
#include "io/reactor.hpp"
#include "io/serial_port.hpp"
#include "io/serial_transport.hpp"
#include "wire/result.hpp"

namespace vessel::bridges::uart {

/// How a uart_link runs. Every key with its default, printable with to_string().
struct uart_link_config {
  io::serial_config serial;               ///< path, baud, line format
  io::serial_transport_config transport;  ///< send queue size
  /// true: calls and sends travel as reliable DATA (exactly once within a run of each side);
  /// false: as UNRELIABLE datagrams (a lost request or reply ends in call_timeout).
  bool reliable = true;
  /// Window, peer window, timeout floor, fast retransmit (baud and format come from `serial`).
  reliable_channel_config channel;
  std::size_t max_calls = 64;  ///< calls and queued sends at once; beyond: errc::too_many_calls
  /// Reopen attempts after an unplug: 50 ms doubling to 2 s, jittered, forever by default.
  io::reconnect_policy reopen{std::chrono::milliseconds{50}, std::chrono::seconds{2}, 2.0, 0, true};
  /// true: calls in flight at an unplug are sent again once the port is back (at-least-once for
  /// those: the board may have run them); false: they fail at once with errc::device_unplugged.
  bool retry_in_flight = true;
  /// This run's session id; unset: a random byte (docs/uart.md, "Sessions").
  std::optional<std::uint8_t> session;

  std::string to_string() const;
};

/// Where a link stands.
enum class link_state : std::uint8_t {
  up,      ///< the port is open
  down,    ///< the device went away; reopen attempts are running
  closed,  ///< closed locally, the reactor stopped, or the device never came back: final
};

/// Counters of a link, across reopens.
struct uart_link_counters {
  // Line (serial transport and decoder).
  std::uint64_t frames_in = 0;      ///< frames with a good CRC
  std::uint64_t frames_out = 0;     ///< frames queued for the line
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t crc_errors = 0;
  std::uint64_t bad_length = 0;
  std::uint64_t truncated = 0;
  std::uint64_t resync_bytes = 0;
  std::uint64_t frames_dropped = 0;  ///< frames the full send queue refused (acks; DATA is resent)
  // Reliable mode.
  std::uint64_t retransmits = 0;       ///< frames sent again
  std::uint64_t rto_timeouts = 0;      ///< retransmit timer expiries
  std::uint64_t fast_retransmits = 0;  ///< windows resent on a duplicate ack
  std::uint64_t duplicates = 0;        ///< DATA/SYN of the board seen twice, dropped
  std::uint64_t out_of_order = 0;      ///< DATA of the board after a gap, dropped
  std::uint64_t bad_check = 0;         ///< frames whose link check failed (bogus candidates)
  std::uint64_t bad_header = 0;
  // Calls.
  std::uint64_t calls = 0;          ///< calls accepted
  std::uint64_t replies = 0;        ///< calls completed by a reply (any status)
  std::uint64_t call_timeouts = 0;  ///< calls failed by their deadline
  std::uint64_t calls_failed = 0;   ///< calls failed otherwise (unplug, close, device gone)
  std::uint64_t calls_resent = 0;   ///< calls sent again after a reopen
  std::uint64_t late_replies = 0;   ///< replies to no pending call (after its timeout), dropped
  std::uint64_t sends = 0;          ///< fire-and-forget messages sent
  std::uint64_t events = 0;         ///< unsolicited messages delivered to subscribers
  std::uint64_t malformed = 0;      ///< messages too short for their header, or requests
  // Device.
  std::uint64_t unplugs = 0;
  std::uint64_t reopens = 0;  ///< successful reopens after an unplug
};

/// One board on one serial port. Reactor thread only: construct with open() there, call from
/// there (reactor::dispatch from elsewhere); every callback runs there. Destroy it once its state
/// is closed (or after its reactor stopped).
class uart_link final : private io::serial_handler, private channel_sink {
 public:
  using clock = io::reactor::clock;
  /// A call's outcome: the reply body (valid during the callback only), or why there is none:
  /// errc::call_timeout, device_unplugged, device_gone, link_closed, or a board status
  /// (unknown_command, bad_request, device_busy, device_error). std::function stores a callable
  /// of up to 16 trivially copyable bytes (two pointers) inline, so such callbacks do not allocate.
  using reply_handler = std::function<void(result<std::span<const std::byte>>)>;
  /// An unsolicited message of the board: its topic and body (valid during the call).
  using event_handler = std::function<void(std::uint8_t topic, std::span<const std::byte> body)>;
  /// The link went up, down (with why) or closed.
  using state_handler = std::function<void(link_state, std::error_code)>;

  /// Opens the port and starts the link (in reliable mode, sends the SYN). Errors: those of
  /// serial_transport::open (ENOENT, EBUSY, unsupported_baud...), std::errc::invalid_argument for
  /// max_calls 0 or above 32768, or a window outside 1..8.
  static result<std::unique_ptr<uart_link>> open(io::reactor& r, uart_link_config config);
  ~uart_link() override;
  uart_link(const uart_link&) = delete;
  uart_link& operator=(const uart_link&) = delete;

  /// Sends `command` (0x00..0x7F) with `body` and calls `on_reply` exactly once: with the reply,
  /// or with an error once `timeout` has passed (or sooner, see reply_handler). Calls made while
  /// the device is away wait for it within their timeout. Returns the request id. Errors (and
  /// `on_reply` is then never called): too_many_calls, bad_command, message_too_large, link_closed.
  result<std::uint16_t> call(std::uint8_t command, std::span<const std::byte> body,
                             clock::duration timeout, reply_handler on_reply);

  /// Sends `command` with `body`, no reply expected (request id 0). Queued behind calls like them;
  /// reliable mode delivers it exactly once while the board stays up. Same errors as call().
  result<void> send(std::uint8_t command, std::span<const std::byte> body);

  /// Calls `on_event` for every unsolicited message from now on; returns an id for unsubscribe.
  /// Not from inside an event handler (the list may grow under the walk); unsubscribe may be.
  std::uint64_t subscribe(event_handler on_event);
  void unsubscribe(std::uint64_t id) noexcept;
  /// Replaces the state callback.
  void on_state(state_handler on_state) { state_handler_ = std::move(on_state); }

  /// Fails every pending call with link_closed, stops reopening and closes the port; the state
  /// callback then reports closed. Idempotent.
  void close();

  link_state state() const noexcept { return state_; }
  uart_link_counters counters() const noexcept;
  const uart_link_config& config() const noexcept { return config_; }
  /// Calls and queued sends not completed yet.
  std::size_t pending() const noexcept { return pending_; }
  /// The retransmit timeout of a frame of `frame_bytes` on this line.
  std::chrono::nanoseconds retransmit_timeout(std::size_t frame_bytes) const noexcept {
    return channel_.rto(frame_bytes);
  }
  /// Service granularity: how often deadlines are checked while anything is in flight.
  std::chrono::nanoseconds tick() const noexcept { return tick_; }
  const reliable_channel& channel() const noexcept { return channel_; }

 private:
  static constexpr std::uint32_t none = UINT32_MAX;

  struct call_slot {
    std::uint16_t id = 0;  // 0: free
    bool in_use = false;
    bool expects_reply = false;
    bool sent = false;     // on the line (in the window, or written as a datagram)
    std::uint8_t len = 0;
    std::uint64_t order = 0;  // when it was first queued: resend order after a reopen
    clock::time_point deadline{};
    reply_handler handler;
    std::uint32_t prev = none, next = none;  // waiting list
    std::array<std::byte, link_max_message> message{};
  };

  uart_link(io::reactor& r, uart_link_config config);

  // io::serial_handler
  void on_serial_frame(std::span<const std::byte> payload) override;
  void on_writable() override;
  void on_closed(std::error_code why) override;
  // channel_sink
  void write_link_payload(std::span<const std::byte> payload) override;
  void deliver(std::span<const std::byte> message, bool reliable) override;

  result<std::uint32_t> take_slot(std::uint8_t command, std::span<const std::byte> body,
                                  bool expects_reply);
  void free_slot(std::uint32_t idx) noexcept;
  void push_waiting(std::uint32_t idx) noexcept;
  void unlink_waiting(std::uint32_t idx) noexcept;
  void flush_waiting();
  void complete(std::uint32_t idx, result<std::span<const std::byte>> outcome);
  void fail_all(std::error_code why);
  void arm_tick();
  void on_tick();
  void schedule_reopen();
  void try_reopen();
  void become_closed(std::error_code why);
  void notify(link_state s, std::error_code why);

  io::reactor& reactor_;
  uart_link_config config_;
  reliable_channel channel_;
  std::unique_ptr<io::serial_transport> transport_;
  link_state state_ = link_state::up;
  bool closing_ = false;
  std::uint8_t session_ = 0;

  std::vector<call_slot> slots_;
  std::vector<std::uint32_t> scratch_;  // slot indices, for the resend order after an unplug
  std::size_t pending_ = 0;
  std::uint16_t next_id_ = 1;
  std::uint64_t next_order_ = 0;
  std::uint32_t wait_head_ = none, wait_tail_ = none;

  std::vector<std::pair<std::uint64_t, event_handler>> subscribers_;
  std::uint64_t next_subscriber_ = 1;
  state_handler state_handler_;

  std::chrono::nanoseconds tick_{};
  io::timer_id tick_timer_ = 0;
  io::timer_id reopen_timer_ = 0;
  io::backoff backoff_;

  uart_link_counters own_;  // the counters kept here (calls, device); the rest are read live
};

}  // namespace vessel::bridges::uart
