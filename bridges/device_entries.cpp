#include "bridges/device_entries.hpp"

#include <system_error>

namespace vessel::bridges {

std::vector<std::string_view> split_list(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const auto at = text.find(sep);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return out;
}

result<std::vector<std::vector<device_option>>> device_entries(std::string_view devices,
                                                               std::string_view type) {
  std::vector<std::vector<device_option>> out;
  for (auto entry : split_list(devices, ';')) {
    if (entry.empty()) continue;
    const auto colon = entry.find(':');
    if (entry.substr(0, colon) != type) continue;
    std::vector<device_option> options;
    const auto keys = colon == std::string_view::npos ? std::string_view{} : entry.substr(colon + 1);
    for (auto kv : split_list(keys, ',')) {
      if (kv.empty()) continue;
      const auto eq = kv.find('=');
      if (eq == std::string_view::npos) return std::make_error_code(std::errc::invalid_argument);
      options.push_back({kv.substr(0, eq), kv.substr(eq + 1)});
    }
    out.push_back(std::move(options));
  }
  return out;
}

}  // namespace vessel::bridges
