#include "bridges/uart/errc.hpp"

#include <string>

namespace vessel::bridges::uart {
namespace {

class uart_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vessel.uart"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::call_timeout: return "no reply from the device before the call's deadline";
      case errc::device_unplugged: return "the device was unplugged while the call was in flight";
      case errc::device_gone: return "the device did not come back after it was unplugged";
      case errc::link_closed: return "the UART link was closed";
      case errc::too_many_calls: return "every call slot of the UART link is taken";
      case errc::message_too_large: return "the message does not fit a serial frame";
      case errc::window_full: return "the reliable window is full";
      case errc::bad_command: return "command ids are 0x00..0x7F";
      case errc::unknown_command: return "the device does not know this command";
      case errc::bad_request: return "the device refused the request body as malformed";
      case errc::device_busy: return "the device is busy";
      case errc::device_error: return "the device answered with an error status";
      case errc::not_started: return "the reliable channel was not started";
    }
    return "unknown vessel.uart error";
  }
};

}  // namespace

const std::error_category& uart_category() noexcept {
  static const uart_error_category category;
  return category;
}

}  // namespace vessel::bridges::uart
