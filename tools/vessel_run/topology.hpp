#pragma once
// A job's topology file (TOML): hosts, ranks per host, transports per link class, and the devices
// attached to ranks. vessel-run reads it and hands each rank its slice through the environment
// (rank_environment()); examples under examples/topologies/.

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/detailed_error.hpp"

namespace vessel::tools {

struct host_entry {
  std::string name;
  std::string address;               ///< where its ranks are reached (and the store, for host 0)
  int ranks = 1;                     ///< ranks on this host (default 1), in file order
  std::optional<std::string> netns;  ///< start its ranks inside this network namespace
};

/// One device a rank drives: `kind` is "uart", "ble" or "gpu"; `settings` its keys as strings
/// (uart: port, baud, framing; ble: address or name, services; gpu: index).
struct device_entry {
  int rank = 0;
  std::string kind;
  std::vector<std::pair<std::string, std::string>> settings;
};

struct topology {
  std::string path;  ///< absolute path of the file, passed on as VESSEL_TOPOLOGY
  std::vector<host_entry> hosts;
  /// Link class ("same_host", "cross_host") -> transport ("shm", "tcp", "rdma").
  std::map<std::string, std::string> transports;
  std::vector<device_entry> devices;

  int world_size() const noexcept;
  /// Host index of `rank` and its rank on that host.
  std::pair<std::size_t, int> place(int rank) const noexcept;
};

/// Parses and validates the file. Errors name the file, line and key:
/// "t.toml:7:9: hosts[1].ranks: must be an integer >= 1, got -2".
actors::detailed_result<topology> load_topology(const std::string& path);

/// The variables vessel-run sets for `rank` besides the launcher's own: VESSEL_TOPOLOGY,
/// VESSEL_HOST, VESSEL_HOST_ADDRESS, VESSEL_TRANSPORTS ("same_host=shm,cross_host=tcp"),
/// VESSEL_DEVICES ("uart:port=/dev/ttyUSB0,baud=115200,framing=vessel;gpu:index=0", empty when
/// the rank has none).
std::vector<std::pair<std::string, std::string>> rank_environment(const topology& t, int rank);

}  // namespace vessel::tools
