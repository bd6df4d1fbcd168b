#include "bridges/ble/device_spec.hpp"

#include <string>

namespace vessel::bridges::ble {
namespace {

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const auto at = text.find(sep);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return out;
}

}  // namespace

result<std::vector<ble_device_config>> parse_ble_devices(std::string_view devices) {
  const auto bad = std::make_error_code(std::errc::invalid_argument);
  std::vector<ble_device_config> out;
  for (auto entry : split(devices, ';')) {
    if (entry.empty()) continue;
    const auto colon = entry.find(':');
    if (entry.substr(0, colon) != "ble") continue;
    ble_device_config c;
    c.name = "ble" + std::to_string(out.size());
    const auto keys = colon == std::string_view::npos ? std::string_view{} : entry.substr(colon + 1);
    for (auto kv : split(keys, ',')) {
      if (kv.empty()) continue;
      const auto eq = kv.find('=');
      if (eq == std::string_view::npos || eq + 1 == kv.size()) return bad;
      const auto key = kv.substr(0, eq);
      const auto value = kv.substr(eq + 1);
      if (key == "address") {
        c.peripheral.address = std::string{value};
      } else if (key == "name") {
        c.peripheral.name = std::string{value};
      } else if (key == "services") {
        for (auto uuid : split(value, '+')) {
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
