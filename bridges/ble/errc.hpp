#pragma once
// Typed errors of the BLE bridge. BlueZ answers with org.bluez.Error.* names; each maps to one
// member here, and a ble_error carries it together with the device and characteristic it concerns.

#include <string>
#include <string_view>
#include <system_error>

#include "wire/result.hpp"

namespace vessel::bridges::ble {

/// Why a BLE operation failed.
enum class errc {
  bus_unavailable = 1,       ///< the system bus or org.bluez is not reachable.
  no_adapter,                ///< no Bluetooth adapter (or not the one asked for).
  device_not_found,          ///< no device with this address is known or discovered.
  characteristic_not_found,  ///< the device has no characteristic with this UUID.
  not_connected,             ///< org.bluez.Error.NotConnected: the link is down.
  already_connected,         ///< org.bluez.Error.AlreadyConnected.
  in_progress,               ///< org.bluez.Error.InProgress: the same operation is already running.
  not_permitted,      ///< org.bluez.Error.NotPermitted: the characteristic's flags forbid it.
  not_authorized,     ///< org.bluez.Error.NotAuthorized/AuthenticationFailed: pairing needed or
                      ///< refused.
  not_supported,      ///< org.bluez.Error.NotSupported.
  invalid_arguments,  ///< org.bluez.Error.InvalidArguments/InvalidOffset/InvalidValueLength.
  does_not_exist,     ///< org.bluez.Error.DoesNotExist or an object that vanished.
  already_exists,     ///< org.bluez.Error.AlreadyExists (e.g. Pair on a paired device).
  failed,             ///< org.bluez.Error.Failed (e.g. le-connection-abort-by-local).
  timeout,            ///< no answer in time (D-Bus NoReply, connect or resolve deadline).
  link_lost,          ///< the link went down and the request's retry budget or deadline ran out.
  closed,             ///< the peripheral engine was closed.
  bluez_other,        ///< any other D-Bus error name (kept in ble_error::detail).
};

const std::error_category& ble_category() noexcept;
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), ble_category()};
}

/// The typed error for a D-Bus error name such as "org.bluez.Error.NotConnected".
errc errc_from_dbus_name(std::string_view name) noexcept;

/// A failed BLE operation: what, on which device and characteristic, and BlueZ's own words.
struct ble_error {
  std::error_code code;
  std::string device;          ///< address or object path; empty when not device-specific
  std::string characteristic;  ///< UUID; empty when not about a characteristic
  std::string detail;          ///< the D-Bus error name and message, when BlueZ gave one
  std::string to_string() const;
};

template <class T>
using ble_result = outcome::std_result<T, ble_error, outcome::policy::terminate>;

}  // namespace vessel::bridges::ble

template <>
struct std::is_error_code_enum<vessel::bridges::ble::errc> : std::true_type {};
