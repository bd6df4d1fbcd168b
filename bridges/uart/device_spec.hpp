#pragma once
// The UART devices of this rank as vessel-run hands them over: VESSEL_DEVICES, `;`-separated
// entries `kind:key=value,...` (README, "Environment variables"). Entries of other kinds (gpu,
// ble) are skipped. Keys of a `uart` entry: port (required), baud (default 115200), framing
// ("reliable", the default: the reliable mode; "vessel": plain frames), name (default
// "uart<index among the uart entries>").

#include <string_view>
#include <vector>

#include "bridges/uart/uart_device.hpp"
#include "wire/result.hpp"

namespace vessel::bridges::uart {

/// The uart entries of `devices` as device configs (the rest of each config at its default).
/// std::errc::invalid_argument for an entry without a port, a malformed baud, an unknown framing
/// or key.
result<std::vector<uart_device_config>> parse_uart_devices(std::string_view devices);

}  // namespace vessel::bridges::uart
