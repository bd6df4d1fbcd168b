#include "bridges/uart/device_spec.hpp"

#include <charconv>
#include <string>

namespace vessel::bridges::uart {
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

result<std::vector<uart_device_config>> parse_uart_devices(std::string_view devices) {
  const auto bad = std::make_error_code(std::errc::invalid_argument);
  std::vector<uart_device_config> out;
  for (auto entry : split(devices, ';')) {
    if (entry.empty()) continue;
    const auto colon = entry.find(':');
    if (entry.substr(0, colon) != "uart") continue;
    uart_device_config c;
    c.name = "uart" + std::to_string(out.size());
    bool has_port = false;
    const auto keys = colon == std::string_view::npos ? std::string_view{} : entry.substr(colon + 1);
    for (auto kv : split(keys, ',')) {
      if (kv.empty()) continue;
      const auto eq = kv.find('=');
      if (eq == std::string_view::npos) return bad;
      const auto key = kv.substr(0, eq);
      const auto value = kv.substr(eq + 1);
      if (key == "port") {
        c.link.serial.path = std::string{value};
        has_port = !value.empty();
      } else if (key == "baud") {
        std::uint32_t baud = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), baud);
        if (ec != std::errc{} || end != value.data() + value.size() || baud == 0) return bad;
        c.link.serial.baud = baud;
      } else if (key == "framing") {
        if (value == "reliable") {
          c.link.reliable = true;
        } else if (value == "vessel") {
          c.link.reliable = false;
        } else {
          return bad;
        }
      } else if (key == "name") {
        if (value.empty()) return bad;
        c.name = std::string{value};
      } else {
        return bad;
      }
    }
    if (!has_port) return bad;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace vessel::bridges::uart
