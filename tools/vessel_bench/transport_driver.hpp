#pragma once
// What the two-process transport benchmarks (transport_tcp.cpp, transport_shm.cpp) share: the
// size plan, the interleaved schedule (per size: one warm-up of each side, then `runs` pairs
// vessel, peer, vessel, peer ...), medians into the report, and the fork of the responder.
// None of it is on a measured path: each call of a side times a whole run of iterations.

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace vessel::bench {

struct bench_options;
class report;

using clock_type = std::chrono::steady_clock;

/// Ends a benchmark with a message (caught and printed by run_two_processes()).
[[noreturn]] void bench_fail(const std::string& what);

/// Seconds since `t0`.
inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Sizes and iteration counts; both processes derive the same schedule from the same options.
struct transport_plan {
  std::vector<std::size_t> latency_sizes;    ///< ping-pong, one frame each way
  std::vector<std::size_t> bandwidth_sizes;  ///< streamed, `bandwidth_iters` messages per run
  std::size_t runs = 5;
  std::size_t fixed_iterations = 0;             ///< --iterations; 0: derived from the size
  std::size_t small_latency_iterations = 5000;  ///< round trips per run up to 4 KiB

  /// The default sweep (latency 8 B .. 1 MiB by 8x, bandwidth 64 KiB .. 64 MiB by 4x), or the
  /// --sizes list: latency for sizes that fit one frame (<= max_frame), bandwidth from 64 KiB.
  static transport_plan from(const bench_options& opts, std::size_t max_frame,
                             std::size_t small_latency_iterations);

  std::size_t latency_iters(std::size_t size) const;
  std::size_t bandwidth_iters(std::size_t size) const;  ///< ~256 MiB per run
  std::size_t max_size() const;
};

/// One side of a measurement: `iters` exchanges of `size` bytes; returns the metric (us for
/// latency, GB/s for bandwidth). A responder's sides return anything (0).
using measure_fn = std::function<double(std::size_t size, std::size_t iters)>;

/// vessel and the peer it is compared with, measured alternately.
struct ab_sides {
  measure_fn vessel;
  measure_fn peer;
};

/// Where medians go (the initiator); a responder passes none.
struct schedule_output {
  report* out = nullptr;
  const char* transport = "";  ///< "tcp", "shm"
  const char* peer = "";       ///< "socket", "memcpy"
  bool verbose = false;        ///< every run's pair on stderr
};

/// Walks the plan: latency sizes, then bandwidth sizes; per size one warm-up of each side
/// (iters / 10 + 1 round trips, one streamed message), then `runs` vessel/peer pairs. Both
/// processes must walk the same plan. With `output.out`, one row per size: pingpong/latency and
/// stream/bandwidth, medians of the runs.
void run_schedule(const transport_plan& plan, const ab_sides& latency, const ab_sides& bandwidth,
                  const schedule_output& output = {});

/// Half a round trip in microseconds, from `seconds` for `round_trips`.
inline double half_round_trip_us(double seconds, std::size_t round_trips) {
  return seconds / static_cast<double>(round_trips) / 2 * 1e6;
}
/// GB/s (10^9 B/s) for `iters` messages of `size` bytes in `seconds`.
inline double gigabytes_per_second(std::size_t size, std::size_t iters, double seconds) {
  return static_cast<double>(size) * static_cast<double>(iters) / seconds / 1e9;
}

/// Forks: `responder` runs in the child, `initiator` here. An exception from either is printed
/// as "vessel-bench <name> (responder|initiator): what"; the child is killed when the initiator
/// fails. 0 when both ended normally. Call before any thread exists.
int run_two_processes(const char* name, const std::function<void()>& responder,
                      const std::function<void()>& initiator);

}  // namespace vessel::bench
