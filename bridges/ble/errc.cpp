#include "bridges/ble/errc.hpp"

#include <array>
#include <utility>

namespace vessel::bridges::ble {
namespace {

class ble_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vessel.ble"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::bus_unavailable: return "system bus or org.bluez unavailable";
      case errc::no_adapter: return "no Bluetooth adapter";
      case errc::device_not_found: return "device not found";
      case errc::characteristic_not_found: return "characteristic not found";
      case errc::not_connected: return "device not connected";
      case errc::already_connected: return "device already connected";
      case errc::in_progress: return "operation already in progress";
      case errc::not_permitted: return "operation not permitted by the characteristic";
      case errc::not_authorized: return "not authorized (pairing required or refused)";
      case errc::not_supported: return "operation not supported";
      case errc::invalid_arguments: return "invalid arguments";
      case errc::does_not_exist: return "object does not exist";
      case errc::already_exists: return "already exists";
      case errc::failed: return "operation failed";
      case errc::timeout: return "timed out";
      case errc::link_lost: return "link lost and not restored in time";
      case errc::closed: return "peripheral closed";
      case errc::bluez_other: return "BlueZ error";
    }
    return "unknown vessel.ble error";
  }
};

}  // namespace

const std::error_category& ble_category() noexcept {
  static const ble_error_category category;
  return category;
}

errc errc_from_dbus_name(std::string_view name) noexcept {
  static constexpr std::array<std::pair<std::string_view, errc>, 18> table{{
      {"org.bluez.Error.NotConnected", errc::not_connected},
      {"org.bluez.Error.AlreadyConnected", errc::already_connected},
      {"org.bluez.Error.InProgress", errc::in_progress},
      {"org.bluez.Error.NotPermitted", errc::not_permitted},
      {"org.bluez.Error.NotAuthorized", errc::not_authorized},
      {"org.bluez.Error.AuthenticationFailed", errc::not_authorized},
      {"org.bluez.Error.AuthenticationRejected", errc::not_authorized},
      {"org.bluez.Error.NotSupported", errc::not_supported},
      {"org.bluez.Error.InvalidArguments", errc::invalid_arguments},
      {"org.bluez.Error.InvalidOffset", errc::invalid_arguments},
      {"org.bluez.Error.InvalidValueLength", errc::invalid_arguments},
      {"org.bluez.Error.DoesNotExist", errc::does_not_exist},
      {"org.freedesktop.DBus.Error.UnknownObject", errc::does_not_exist},
      {"org.freedesktop.DBus.Error.UnknownMethod", errc::does_not_exist},
      {"org.bluez.Error.AlreadyExists", errc::already_exists},
      {"org.bluez.Error.Failed", errc::failed},
      {"org.freedesktop.DBus.Error.NoReply", errc::timeout},
      {"org.freedesktop.DBus.Error.ServiceUnknown", errc::bus_unavailable},
  }};
  for (const auto& [n, e] : table)
    if (n == name) return e;
  return errc::bluez_other;
}

std::string ble_error::to_string() const {
  std::string s = code.message();
  if (!device.empty()) s += " (device " + device;
  if (!characteristic.empty())
    s += (device.empty() ? " (characteristic " : ", characteristic ") + characteristic;
  if (!device.empty() || !characteristic.empty()) s += ")";
  if (!detail.empty()) s += ": " + detail;
  return s;
}

}  // namespace vessel::bridges::ble
