#pragma once
// The entries of VESSEL_DEVICES (set by vessel-run --topology), one per device attached to this
// rank: "uart:port=/dev/ttyUSB0,baud=115200;ble:name=sensor,services=180f". Each bridge reads
// the entries of its own type and gives their options meaning (bridges/*/device_spec.hpp).

#include <string_view>
#include <vector>

#include "wire/result.hpp"

namespace vessel::bridges {

/// One `key=value` option of an entry (views into the string parsed).
struct device_option {
  std::string_view key;
  std::string_view value;
};

/// `text` cut at every `sep` (empty pieces kept; an empty text gives none).
std::vector<std::string_view> split_list(std::string_view text, char sep);

/// The options of every entry of `type` in `devices`, in order; entries of other types are
/// skipped. std::errc::invalid_argument for an option without '='.
result<std::vector<std::vector<device_option>>> device_entries(std::string_view devices,
                                                               std::string_view type);

}  // namespace vessel::bridges
