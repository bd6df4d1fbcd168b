#pragma once
// The BLE devices of this rank as vessel-run hands them over: VESSEL_DEVICES, `;`-separated
// entries `kind:key=value,...` (README, "Environment variables"; tools/vessel_run/topology.cpp
// writes them from a topology file's [[devices]] tables). Entries of other kinds (uart, gpu) are
// skipped. Keys of a `ble` entry: exactly one of address (C0:FF:EE:00:00:01) and name (the
// peripheral's advertised name), and services (advertised service UUIDs joined by '+', any form
// normalize_uuid accepts: the peripheral must advertise one of them). The device actor is named
// "ble<index among the ble entries>"; every other key of the config keeps its default.

#include <string_view>
#include <vector>

#include "bridges/ble/device_actor.hpp"
#include "wire/result.hpp"

namespace vessel::bridges::ble {

/// The ble entries of `devices` as device configs. std::errc::invalid_argument for an entry with
/// both or neither of address and name, an empty value, or an unknown key.
result<std::vector<ble_device_config>> parse_ble_devices(std::string_view devices);

}  // namespace vessel::bridges::ble
