#include "bridges/uart/device_spec.hpp"

#include <charconv>
#include <string>

#include "bridges/device_entries.hpp"

namespace vessel::bridges::uart {

result<std::vector<uart_device_config>> parse_uart_devices(std::string_view devices) {
  const auto bad = std::make_error_code(std::errc::invalid_argument);
  auto entries = device_entries(devices, "uart");
  if (!entries) return entries.error();
  std::vector<uart_device_config> out;
  for (const auto& options : entries.value()) {
    uart_device_config c;
    c.name = "uart" + std::to_string(out.size());
    bool has_port = false;
    for (const auto& [key, value] : options) {
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
