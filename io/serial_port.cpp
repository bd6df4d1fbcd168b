#include "io/serial_port.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <utility>

#include "io/errc.hpp"

namespace vessel::io {
namespace {

struct baud_entry {
  std::uint32_t baud;
  speed_t speed;
};

// Every rate <termios.h> names on Linux. 134 is really 134.5 baud (IBM 2741); nobody asks for it.
constexpr std::array<baud_entry, 30> baud_table{{
    {50, B50},           {75, B75},           {110, B110},         {134, B134},
    {150, B150},         {200, B200},         {300, B300},         {600, B600},
    {1200, B1200},       {1800, B1800},       {2400, B2400},       {4800, B4800},
    {9600, B9600},       {19200, B19200},     {38400, B38400},     {57600, B57600},
    {115200, B115200},   {230400, B230400},   {460800, B460800},   {500000, B500000},
    {576000, B576000},   {921600, B921600},   {1000000, B1000000}, {1152000, B1152000},
    {1500000, B1500000}, {2000000, B2000000}, {2500000, B2500000}, {3000000, B3000000},
    {3500000, B3500000}, {4000000, B4000000},
}};

tcflag_t size_flag(unsigned data_bits) noexcept {
  switch (data_bits) {
    case 5: return CS5;
    case 6: return CS6;
    case 7: return CS7;
    default: return CS8;
  }
}

char parity_letter(wire::serial_parity parity) noexcept {
  switch (parity) {
    case wire::serial_parity::none: return 'N';
    case wire::serial_parity::odd: return 'O';
    case wire::serial_parity::even: return 'E';
    case wire::serial_parity::mark: return 'M';
    case wire::serial_parity::space: return 'S';
  }
  return '?';
}

std::error_code last_errno() noexcept { return {errno, std::generic_category()}; }

}  // namespace

result<speed_t> baud_to_speed(std::uint32_t baud) noexcept {
  for (const auto& entry : baud_table) {
    if (entry.baud == baud) return entry.speed;
  }
  return errc::unsupported_baud;
}

std::uint32_t speed_to_baud(speed_t speed) noexcept {
  for (const auto& entry : baud_table) {
    if (entry.speed == speed) return entry.baud;
  }
  return 0;
}

result<void> serial_config::validate() const {
  if (path.empty()) return std::make_error_code(std::errc::invalid_argument);
  VESSEL_TRY(baud_to_speed(baud));
  // 9 data bits exist on some UARTs, but termios has no CS9: such a line cannot be set up here.
  if (data_bits < 5 || data_bits > 8) return errc::unsupported_serial_format;
  if (stop_bits < 1 || stop_bits > 2) return errc::unsupported_serial_format;
  return outcome::success();
}

std::string serial_config::to_string() const {
  std::string format;
  format += static_cast<char>('0' + data_bits % 10);
  format += parity_letter(parity);
  format += static_cast<char>('0' + stop_bits % 10);
  return "path=" + path + " baud=" + std::to_string(baud) + " format=" + format +
         " rts_cts=" + (rts_cts ? "1" : "0");
}

result<void> configure_tty(int fd, const serial_config& config) noexcept {
  VESSEL_TRY(config.validate());
  const speed_t speed = baud_to_speed(config.baud).value();

  termios tio{};
  if (::tcgetattr(fd, &tio) != 0) return last_errno();
  ::cfmakeraw(&tio);
  if (::cfsetispeed(&tio, speed) != 0 || ::cfsetospeed(&tio, speed) != 0) {
    return errc::unsupported_baud;
  }
  // CLOCAL: ignore modem lines (DCD), or a board without DCD would never open or read.
  // CREAD: enable the receiver.
  tio.c_cflag |= CLOCAL | CREAD;
  tio.c_cflag &= ~(CSIZE | PARENB | PARODD | CMSPAR | CSTOPB | CRTSCTS);
  tio.c_cflag |= size_flag(config.data_bits);
  switch (config.parity) {
    case wire::serial_parity::none: break;
    case wire::serial_parity::odd: tio.c_cflag |= PARENB | PARODD; break;
    case wire::serial_parity::even: tio.c_cflag |= PARENB; break;
    case wire::serial_parity::mark: tio.c_cflag |= PARENB | CMSPAR | PARODD; break;
    case wire::serial_parity::space: tio.c_cflag |= PARENB | CMSPAR; break;
  }
  if (config.parity != wire::serial_parity::none) {
    // Check parity and drop bad characters (IGNPAR) rather than mark them in-band: the frame's
    // CRC-8 then rejects the frame that lost a byte, and the decoder resynchronises.
    tio.c_iflag |= INPCK | IGNPAR;
  }
  if (config.stop_bits == 2) tio.c_cflag |= CSTOPB;
  if (config.rts_cts) tio.c_cflag |= CRTSCTS;
  tio.c_cc[VMIN] = 1;
  tio.c_cc[VTIME] = 0;
  if (::tcsetattr(fd, TCSANOW, &tio) != 0) return last_errno();

  termios got{};
  if (::tcgetattr(fd, &got) != 0) return last_errno();
  if (::cfgetospeed(&got) != speed || ::cfgetispeed(&got) != speed) return errc::unsupported_baud;
  if ((got.c_cflag & (CSIZE | PARENB | PARODD | CSTOPB)) !=
      (tio.c_cflag & (CSIZE | PARENB | PARODD | CSTOPB))) {
    return errc::unsupported_serial_format;
  }
  return outcome::success();
}

serial_port& serial_port::operator=(serial_port&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

result<serial_port> serial_port::open(const serial_config& config) {
  VESSEL_TRY(config.validate());
  // O_NONBLOCK only for the open itself: without it, opening a modem port whose CLOCAL is still
  // clear blocks until carrier detect. Cleared once CLOCAL is set (see the header for why).
  const int fd = ::open(config.path.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return last_errno();
  serial_port port{fd};
  if (::isatty(fd) == 0) return std::make_error_code(std::errc::inappropriate_io_control_operation);
  if (::ioctl(fd, TIOCEXCL) != 0) return last_errno();
  VESSEL_TRY(configure_tty(fd, config));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return last_errno();
  // Bytes the driver received before we owned the line belong to nobody's frame.
  ::tcflush(fd, TCIOFLUSH);
  return port;
}

void serial_port::close() noexcept {
  if (fd_ < 0) return;
  ::tcflush(fd_, TCOFLUSH);
  // The exclusive flag belongs to the tty, not to this fd: a tty kept open by someone else (a pty
  // emulator's own slave fd) would refuse our next open with EBUSY if it stayed set.
  ::ioctl(fd_, TIOCNXCL);
  ::close(fd_);
  fd_ = -1;
}

}  // namespace vessel::io
