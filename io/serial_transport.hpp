#pragma once
// A UART link driven by the reactor: reads and writes of the tty go through io_uring, received
// bytes go through wire's serial frame decoder (`0xAA | len | payload | crc8`), whose read timeout
// (derived from the baud rate, wire/serial_timing.hpp) runs on a reactor timer.
//
// Why not io::transport: a serial link carries the boards' serial frames (payload <= 253 bytes,
// no vessel frame header, no sequence numbers), not vessel's stream frames. Mapping them onto
// transport::send(frame_header, ...) would mean inventing a header the board never sees, so the
// link gets its own small handler. A bridge actor that wants a board to look like any other peer
// puts its own framing inside the serial payload.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <system_error>

#include "io/io_op.hpp"
#include "io/reactor.hpp"
#include "io/serial_port.hpp"
#include "wire/result.hpp"
#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"

namespace vessel::io {

/// Receives what a serial_transport delivers; called on the owning reactor thread. It may call
/// send_frame() and close() from any callback, reopen() and the destructor from on_closed() only.
class serial_handler {
 public:
  virtual ~serial_handler() = default;
  /// One complete frame whose CRC matched. `payload` is valid only during the call.
  virtual void on_serial_frame(std::span<const std::byte> payload) = 0;
  /// The send queue, after refusing a frame with errc::send_queue_full, has room for a largest frame.
  virtual void on_writable() {}
  /// The link ended: errc::device_unplugged (EIO/ENXIO/ENODEV on a read or write, POLLHUP/POLLERR,
  /// or a read of 0 bytes, which a raw tty returns only after hang-up), errc::transport_closed
  /// (close(), or the reactor stopped), or another error of a read or write. Final for this open:
  /// every operation has completed and the fd is closed, so reopen() may follow.
  virtual void on_closed(std::error_code why) = 0;
};

/// How a serial_transport buffers. Every key with its default.
struct serial_transport_config {
  /// Bytes of encoded frames the send queue holds; send_frame() refuses beyond (send_queue_full).
  /// 4 KiB = 16 largest frames = 356 ms at 115200 baud: enough to ride out a board's busy spell,
  /// small enough that a caller learns of a stalled line (CTS low, board gone) quickly.
  std::size_t send_queue_bytes = 4096;
};

/// Counters of a serial link, across reopens; read on the reactor thread.
struct serial_stats {
  std::uint64_t frames_received = 0;  ///< frames delivered to on_serial_frame
  std::uint64_t frames_queued = 0;    ///< frames accepted by send_frame
  std::uint64_t bytes_received = 0;   ///< bytes read from the tty
  std::uint64_t bytes_sent = 0;       ///< bytes written to the tty
  std::uint64_t crc_errors = 0;       ///< decoder: candidate frames with a bad CRC
  std::uint64_t bad_length = 0;       ///< decoder: candidates with len 254/255
  std::uint64_t truncated = 0;        ///< decoder: partial frames cut by a silence > read timeout
  std::uint64_t resync_bytes = 0;     ///< decoder: bytes skipped while hunting for 0xAA
  std::uint64_t unplugs = 0;          ///< times the device went away (on_closed(device_unplugged))
  std::uint64_t opens = 0;            ///< successful open() and reopen() calls
  std::uint64_t send_queue_full = 0;  ///< times send_frame() pushed back
  std::uint64_t send_queue_high_water = 0;  ///< most bytes ever queued
};

/// One open serial line. Reactor thread only (use reactor::dispatch from elsewhere). The object
/// must stay in place while operations are in flight: destroy it only when it is closed (from or
/// after on_closed, or after the reactor has stopped).
class serial_transport {
 public:
  using clock = reactor::clock;

  /// Opens `config.path` (serial_port::open) and starts reading. Errors: those of serial_port::open.
  static result<std::unique_ptr<serial_transport>> open(reactor& r, serial_config config,
                                                        serial_handler& handler,
                                                        serial_transport_config tconfig = {});
  ~serial_transport();
  serial_transport(const serial_transport&) = delete;
  serial_transport& operator=(const serial_transport&) = delete;

  /// Opens the same path again after on_closed, e.g. when an unplugged adapter is back (udev
  /// recreated the node, or a stable /dev/serial/by-id symlink points at the new one). The decoder
  /// starts empty; counters carry on. Fails with std::errc::operation_in_progress while still open
  /// or closing, and with serial_port::open's errors (ENOENT while the device is away).
  result<void> reopen();

  /// Encodes `payload` as one serial frame into the send queue (one copy of at most 256 bytes: the
  /// caller's span is not kept). wire::errc::serial_payload_too_large above 253 bytes,
  /// errc::send_queue_full when the queue lacks room (on_writable() follows), errc::transport_closed
  /// when not open.
  result<void> send_frame(std::span<const std::byte> payload);

  /// Ends the link: queued bytes are dropped, operations cancelled (a parked read included); then
  /// on_closed(errc::transport_closed), once every operation has completed. Idempotent.
  void close() noexcept;

  bool is_open() const noexcept { return state_ == state::open; }
  /// Bytes accepted by send_frame() and not yet written.
  std::size_t queued_bytes() const noexcept { return tx_size_; }
  /// Counters, the decoder's included.
  serial_stats stats() const noexcept;
  const serial_config& config() const noexcept { return config_; }
  /// The decoder's silence bound: a partial frame older than this is dropped as truncated.
  std::chrono::nanoseconds read_timeout() const noexcept { return decoder_.read_timeout(); }

 private:
  enum class state { closed, open, closing };

  // An op that calls back a member function of the transport.
  template <void (serial_transport::*Fn)(int, std::uint32_t)>
  struct member_op final : io_op {
    explicit member_op(serial_transport& t) : owner(t) {}
    void complete(int res, std::uint32_t flags) override { (owner.*Fn)(res, flags); }
    serial_transport& owner;
  };

  serial_transport(reactor& r, serial_config config, serial_handler& handler,
                   serial_transport_config tconfig);

  result<void> open_port();
  void on_read(int res, std::uint32_t flags);
  void on_write(int res, std::uint32_t flags);
  void on_hangup(int res, std::uint32_t flags);
  void on_timer();
  void deliver(std::span<const std::byte> bytes, clock::time_point now);
  void drain();
  void arm_timer();
  void arm_write();
  void begin_close(std::error_code why) noexcept;
  void finish_if_idle();
  void fold_decoder_counters() noexcept;

  reactor& reactor_;
  serial_config config_;
  serial_handler& handler_;
  serial_transport_config tconfig_;
  serial_port port_;
  state state_ = state::closed;
  std::error_code close_reason_;

  wire::serial_decoder decoder_;
  wire::serial_decoder_counters decoder_base_{};  // counters of decoders before the last reopen
  clock::time_point last_rx_{};
  timer_id timer_ = 0;  // 0: none pending

  member_op<&serial_transport::on_read> read_op_{*this};
  member_op<&serial_transport::on_write> write_op_{*this};
  member_op<&serial_transport::on_hangup> hangup_op_{*this};
  // One read's worth: a UART FIFO hands over at most a few hundred bytes per wake-up anyway.
  std::array<std::byte, 512> rx_buf_{};

  // Send queue: a byte ring of encoded frames. One write in flight, of the contiguous bytes at the
  // head; a partial write resumes from where it stopped.
  std::unique_ptr<std::byte[]> tx_;
  std::size_t tx_head_ = 0;
  std::size_t tx_size_ = 0;
  bool want_writable_ = false;

  serial_stats stats_;
};

}  // namespace vessel::io
