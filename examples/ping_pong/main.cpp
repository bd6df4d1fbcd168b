// ping_pong: two ranks bounce a message back and forth through vessel::comm and print latency
// (half a round trip) and bandwidth for each size from 8 B to 4 MiB.
//
//   vessel-run -n 2 build/bin/ping_pong [--min-bytes 8] [--max-bytes 4M] [--iters 200]
//
// Every received byte is checked against the pattern the sender wrote (exit 1 if one differs).
// Ranks other than 0 and 1 (a larger world) only join the final barrier.

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "actors/comm.hpp"
#include "examples/common/support.hpp"

namespace {

using vessel::examples::fixed;
using vessel::examples::human_bytes;
constexpr std::uint64_t ping_tag = 1;
constexpr std::uint64_t pong_tag = 2;

std::byte pattern(std::size_t i, std::size_t size) {
  return static_cast<std::byte>((i * 131 + size) & 0xff);
}

/// Iterations for `size`: fewer for large messages, so that every size takes similar time.
int iterations_for(std::size_t size, int iters) {
  const std::size_t budget = std::size_t{64} << 20;  // bytes per direction per size, at most
  const std::size_t by_bytes = std::max<std::size_t>(budget / std::max<std::size_t>(size, 1), 4);
  return static_cast<int>(std::min<std::size_t>(std::size_t(iters), by_bytes));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const vessel::examples::arguments args(argc, argv, {"min-bytes", "max-bytes", "iters"});
    const std::size_t min_bytes = args.size("min-bytes", 8);
    const std::size_t max_bytes = args.size("max-bytes", 4 << 20);
    const int iters = static_cast<int>(args.size("iters", 200));
    if (min_bytes == 0 || max_bytes < min_bytes || iters <= 0) {
      std::fprintf(stderr, "ping_pong: want 0 < --min-bytes <= --max-bytes and --iters > 0\n");
      return 2;
    }

    vessel::comm world = vessel::comm::init();
    if (world.size() < 2) {
      std::fprintf(stderr, "ping_pong needs two ranks: vessel-run -n 2 %s\n", argv[0]);
      return 2;
    }
    const std::uint32_t me = world.rank();
    vessel::examples::collective_stats colls;
    std::size_t steps = 0;
    for (std::size_t s = min_bytes; s <= max_bytes; s *= 8) ++steps;
    vessel::examples::progress bar("ping_pong", steps, me == 0);
    vessel::examples::table results({"size", "iters", "latency us", "bandwidth MB/s"});
    int bad_bytes = 0;
    double small_latency_us = 0, best_mbps = 0;

    std::vector<std::byte> out(max_bytes), in(max_bytes);
    std::size_t step = 0;
    for (std::size_t size = min_bytes; size <= max_bytes; size *= 8, ++step) {
      for (std::size_t i = 0; i < size; ++i) out[i] = pattern(i, size);
      const int n = iterations_for(size, iters);
      const auto msg = std::span<const std::byte>(out).first(size);
      const auto buf = std::span<std::byte>(in).first(size);
      if (me <= 1) {
        // One untimed round trip: first-touch of the buffers and the link's pools.
        if (me == 0) {
          world.send(msg, 1, ping_tag);
          world.recv(buf, 1, pong_tag);
        } else {
          world.recv(buf, 0, ping_tag);
          world.send(msg, 0, pong_tag);
        }
        const auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < n; ++k) {
          if (me == 0) {
            world.send(msg, 1, ping_tag);
            world.recv(buf, 1, pong_tag);
          } else {
            world.recv(buf, 0, ping_tag);
            world.send(msg, 0, pong_tag);
          }
        }
        const double seconds = vessel::examples::collective_stats::seconds_since(t0);
        colls.add("ping-pong", 2 * size * std::size_t(n), seconds);
        for (std::size_t i = 0; i < size; ++i) bad_bytes += in[i] != pattern(i, size);
        const double half_rtt = seconds / (2.0 * n);
        const double mbps = double(size) / half_rtt / 1e6;
        if (step == 0) small_latency_us = half_rtt * 1e6;
        best_mbps = std::max(best_mbps, mbps);
        results.add({human_bytes(size), std::to_string(n), fixed(half_rtt * 1e6, 2), fixed(mbps, 1)});
      }
      bar.update(step + 1);
    }
    if (me == 0) {
      std::printf("ping_pong between ranks 0 and 1 (latency: half a round trip)\n");
      results.print();
      std::printf("@summary ping_pong latency_us=%s at_bytes=%zu best_MBps=%s\n",
                  fixed(small_latency_us, 2).c_str(), min_bytes, fixed(best_mbps, 1).c_str());
    }
    vessel::examples::print_stats(world, colls);
    world.finalize();
    if (bad_bytes != 0) {
      std::printf("FAIL rank %u: %d byte(s) differ from what was sent\n", me, bad_bytes);
      return 1;
    }
    std::printf("OK ping_pong rank %u\n", me);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ping_pong: %s\n", e.what());
    return 1;
  }
}
