#include "io/errc.hpp"

#include <cerrno>
#include <string>

namespace vessel::io {
namespace {

class io_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vessel.io"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::connection_closed: return "connection closed by peer";
      case errc::connection_reset: return "connection reset by peer";
      case errc::connection_refused: return "connection refused";
      case errc::connect_timeout: return "connect timed out";
      case errc::peer_timeout: return "peer did not respond in time";
      case errc::send_queue_full: return "send queue full";
      case errc::transport_closed: return "transport closed";
      case errc::device_unplugged: return "device unplugged";
      case errc::bad_frame: return "peer sent a malformed frame";
      case errc::no_device: return "required device not present";
      case errc::handshake_failed: return "transport handshake failed";
      case errc::pool_exhausted: return "buffer pool exhausted";
      case errc::unsupported_baud: return "baud rate not supported by the serial driver";
      case errc::unsupported_serial_format: return "serial character format not supported";
      case errc::work_request_failed: return "RDMA work request completed with an error";
      case errc::not_that_process:
        return "the process read is not the one that offered the memory (pid reused or another "
               "pid namespace)";
    }
    return "unknown vessel.io error";
  }
};

}  // namespace

const std::error_category& io_category() noexcept {
  static const io_error_category category;
  return category;
}

std::error_code error_from_errno(int negative_errno) noexcept {
  switch (-negative_errno) {
    case ECONNRESET:
    case EPIPE: return errc::connection_reset;
    case ECONNREFUSED: return errc::connection_refused;
    case ETIMEDOUT: return errc::peer_timeout;
    case EIO:
    case ENXIO:
    case ENODEV: return errc::device_unplugged;
    default: return std::error_code{-negative_errno, std::generic_category()};
  }
}

}  // namespace vessel::io
