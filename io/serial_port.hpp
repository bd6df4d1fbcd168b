#pragma once
// Opening a UART (or anything that looks like one: a USB-serial adapter, a pty slave) in raw mode
// with a given line format. What moves bytes over it is io/serial_transport.hpp.

#include <termios.h>

#include <cstdint>
#include <string>

#include "wire/result.hpp"
#include "wire/serial_timing.hpp"

namespace vessel::io {

/// How a serial line is set up. Every key with its default, printable with to_string().
struct serial_config {
  std::string path;              ///< the tty, e.g. /dev/ttyUSB0, or a stable symlink to it
  std::uint32_t baud = 115200;   ///< bits per second; one of the Linux B* rates, 50 .. 4000000
  unsigned data_bits = 8;        ///< 5 .. 8
  wire::serial_parity parity = wire::serial_parity::none;
  unsigned stop_bits = 1;        ///< 1 or 2
  bool rts_cts = false;          ///< hardware flow control (CRTSCTS)

  /// Bits on the line per character (8N1: 10): what every timing derived from baud uses.
  unsigned bits_per_char() const noexcept {
    return wire::bits_per_char(data_bits, parity, stop_bits);
  }
  /// errc::unsupported_baud or errc::unsupported_serial_format when the line cannot be set up so;
  /// std::errc::invalid_argument for an empty path.
  result<void> validate() const;
  /// One line, e.g. "path=/dev/ttyUSB0 baud=115200 format=8N1 rts_cts=0".
  std::string to_string() const;
};

/// The termios speed constant (B115200, ...) for `baud`, or errc::unsupported_baud when Linux has
/// none: the non-standard rates need BOTHER/termios2, which no board we support uses.
result<speed_t> baud_to_speed(std::uint32_t baud) noexcept;

/// The baud rate of speed constant `speed`, or 0 when it is not a known B* constant.
std::uint32_t speed_to_baud(speed_t speed) noexcept;

/// Puts an open tty into raw mode with `config`'s line format: cfmakeraw (no echo, no line editing,
/// no CR/LF translation, 8-bit clean), the baud both ways, data bits, parity, stop bits, RTS/CTS,
/// CLOCAL|CREAD, and VMIN=1/VTIME=0 so that a read returns as soon as any byte is there (the
/// inter-byte timeout is the frame decoder's, driven by a reactor timer, not the tty's 0.1 s VTIME).
/// Reads the settings back, because tcsetattr succeeds if ANY of them took.
result<void> configure_tty(int fd, const serial_config& config) noexcept;

/// An open, configured tty: owns the file descriptor.
class serial_port {
 public:
  serial_port() noexcept = default;
  /// Validates `config`, opens config.path with O_RDWR|O_NOCTTY|O_CLOEXEC (O_NOCTTY: the port must
  /// never become the process's controlling terminal), takes it exclusively (TIOCEXCL: a second
  /// opener gets EBUSY instead of stealing bytes), configures it, and drops whatever the driver had
  /// buffered from before. The fd is left blocking: io_uring parks a READ on a blocking tty in its
  /// worker pool, while a non-blocking one may complete with -EAGAIN depending on the kernel.
  /// Errors: those of validate(), the open's errno (std::generic_category: ENOENT, EACCES, EBUSY),
  /// std::errc::inappropriate_io_control_operation when the path is not a tty.
  static result<serial_port> open(const serial_config& config);

  serial_port(serial_port&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  serial_port& operator=(serial_port&& other) noexcept;
  serial_port(const serial_port&) = delete;
  serial_port& operator=(const serial_port&) = delete;
  ~serial_port() { close(); }

  /// The descriptor, or -1 when closed.
  int fd() const noexcept { return fd_; }
  bool is_open() const noexcept { return fd_ >= 0; }

  /// Discards unsent output (a close would otherwise wait up to the driver's closing_wait, 30 s on
  /// a UART whose CTS is low) and closes. Idempotent.
  void close() noexcept;

 private:
  explicit serial_port(int fd) noexcept : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace vessel::io
