#pragma once
// vessel-bench's registration table: each (mode, transport) pair lives in its own file
// (transport_tcp.cpp, transport_shm.cpp, ...) and registers itself here at static-init time,
// so adding a transport or a mode never edits main.cpp or another engineer's file.
//
// A file registers with:
//   VESSEL_BENCH_REGISTER(transport_tcp, "transport", "tcp",
//                         "ping-pong latency and streaming bandwidth over loopback TCP",
//                         &run_transport_tcp);
// and lists itself in tools/CMakeLists.txt.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vessel::bench {

class report;

/// Options parsed from the command line, shared by every mode.
struct bench_options {
  /// Message sizes in bytes from --sizes; empty means "the mode's default sweep".
  std::vector<std::size_t> sizes;
  /// Iterations per measurement from --iterations; 0 means "the mode's default".
  std::size_t iterations = 0;
  /// Repeated measurements per point from --runs (medians are reported over them).
  std::size_t runs = 5;
  /// Ranks (processes) from --ranks, for modes that take a world size; 0 = mode default.
  std::size_t ranks = 0;
  /// Print per-run values on stderr (--verbose).
  bool verbose = false;
};

/// Runs one (mode, transport) benchmark and adds its rows to `out`; returns 0 on success,
/// non-zero (after printing why on stderr) on failure.
using mode_fn = int (*)(const bench_options& opts, report& out);

/// One row of the registration table.
struct mode_entry {
  std::string_view mode;        ///< first CLI argument, e.g. "transport"
  std::string_view transport;   ///< --transport value, e.g. "tcp", "shm"
  std::string_view description; ///< one line for --help
  mode_fn run;                  ///< the benchmark
};

/// Every registered entry, in registration order (static-init order across files is
/// unspecified; main sorts by (mode, transport) before running).
std::span<const mode_entry> registered_modes();

/// Adds `entry` to the table; used through VESSEL_BENCH_REGISTER.
bool register_mode(const mode_entry& entry);

} // namespace vessel::bench

/// Registers a benchmark from its own translation unit. `id` must be unique per program.
#define VESSEL_BENCH_REGISTER(id, mode, transport, description, fn)                            \
  [[maybe_unused]] static const bool vessel_bench_registered_##id =                             \
      ::vessel::bench::register_mode(::vessel::bench::mode_entry{mode, transport, description, fn})
