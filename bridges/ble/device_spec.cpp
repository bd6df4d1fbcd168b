#include "bridges/ble/device_spec.hpp"

#include <string>

#include "bridges/device_entries.hpp"

namespace vessel::bridges::ble {

result<std::vector<ble_device_config>> parse_ble_devices(std::string_view devices) {
  const auto bad = std::make_error_code(std::errc::invalid_argument);
  auto entries = device_entries(devices, "ble");
  if (!entries) return entries.error();
  std::vector<ble_device_config> out;
  for (const auto& options : entries.value()) {
    ble_device_config c;
    c.name = "ble" + std::to_string(out.size());
    for (const auto& [key, value] : options) {
      if (value.empty()) return bad;
      if (key == "address") {
        c.peripheral.address = std::string{value};
      } else if (key == "name") {
        c.peripheral.name = std::string{value};
      } else if (key == "services") {
        for (auto uuid : split_list(value, '+')) {
          if (uuid.empty()) return bad;
          c.peripheral.services.push_back(normalize_uuid(uuid));
        }
      } else {
        return bad;
      }
    }
    if (c.peripheral.address.empty() == c.peripheral.name.empty()) return bad;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace vessel::bridges::ble
