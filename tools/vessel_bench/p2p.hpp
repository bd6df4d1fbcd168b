#pragma once
// `vessel-bench p2p`: point-to-point latency and bandwidth through the whole vessel stack between
// two rank processes, against Open MPI's MPI_Send/MPI_Recv (bench/peers/mpi_p2p.cpp) measured in
// the same invocation. What the driver (p2p.cpp) and the rank processes (p2p_ranks.cpp) share.
//
// Both sides walk the same schedule with the same loops: per point one warm-up of
// iters / 10 + 1 exchanges, a barrier, then `iters` timed exchanges; ping-pong reports half a
// round trip (us), streaming reports one-way bandwidth (GB/s), timed until the receiver's
// one-byte ack is back. Rank 0 prints "latency <bytes> <us>" and "bandwidth <bytes> <GB/s>".

#include <cstddef>
#include <string>
#include <vector>

namespace vessel::bench {

struct bench_options;

/// Which vessel API a rank measures.
enum class p2p_path {
  comm,   ///< the blocking facade vessel::comm (send/recv, runtime hand-off, matcher, mesh)
  actor,  ///< vessel::node's rank actor (CAF request/response, event batcher, outbox, mesh)
  /// The same from an event-based app actor on the node's reactor thread (node::reactor_host):
  /// the actor API without a thread crossing.
  hosted_actor,
};

struct p2p_point {
  std::size_t size = 0;
  std::size_t iters = 0;
};

/// The points both vessel and the peer measure, in order.
struct p2p_schedule {
  std::vector<p2p_point> latency;    ///< 8 B .. 1 MiB by 8x by default
  std::vector<p2p_point> bandwidth;  ///< 64 KiB .. 64 MiB by 4x by default

  /// The default sweep, or --sizes (latency up to 1 MiB, bandwidth from 64 KiB), with
  /// --iterations for every point when given.
  static p2p_schedule from(const bench_options& opts);
  /// "8:2000,64:2000" for the latency points or the bandwidth points (the peer's arguments).
  static std::string encode(const std::vector<p2p_point>& points);
  std::size_t max_size() const;
};

/// Half a round trip in microseconds and GB/s (10^9 B/s), as both sides compute them.
inline double p2p_latency_us(double seconds, std::size_t round_trips) {
  return seconds / static_cast<double>(round_trips) / 2 * 1e6;
}
inline double p2p_bandwidth_gbs(std::size_t size, std::size_t iters, double seconds) {
  return static_cast<double>(size) * static_cast<double>(iters) / seconds / 1e9;
}

/// Body of one forked rank process (VESSEL_RANK, VESSEL_WORLD_SIZE, VESSEL_STORE, VESSEL_TOKEN,
/// VESSEL_TRANSPORT set): joins the 2-rank world through `path`, walks `schedule`, and on rank 0
/// writes the result lines to `out_fd`. Throws std::exception naming what failed.
void run_p2p_rank(p2p_path path, const p2p_schedule& schedule, int out_fd);

}  // namespace vessel::bench
