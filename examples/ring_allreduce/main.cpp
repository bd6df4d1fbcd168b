// ring_allreduce: a loop of float32 sum-allreduces over growing sizes through
// collectives::communicator, printed as nccl-tests prints them, and checked.
//
//   vessel-run -n 4 build/bin/ring_allreduce [--min-bytes 4K] [--max-bytes 16M] [--iters 20]
//                                            [--warmup 2] [--algo auto|ring|recursive_doubling|...]
//
// algbw = bytes / time; busbw = algbw * 2 (n - 1) / n, the bytes every link must carry in an
// optimal allreduce (nccl-tests, doc/PERFORMANCE.md), so that busbw compares across world sizes.
// The inputs are small integers stored as float32, so every sum is exact in any order: each
// result element is compared with the exact value and the program exits 1 on the first mismatch.

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "actors/comm.hpp"
#include "collectives/communicator.hpp"
#include "collectives/selection.hpp"
#include "examples/common/support.hpp"

namespace {

namespace coll = vessel::collectives;
using vessel::examples::fixed;
using vessel::examples::human_bytes;

float input_value(std::uint32_t rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 64) - 32);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const vessel::examples::arguments args(argc, argv,
                                           {"min-bytes", "max-bytes", "iters", "warmup", "algo"});
    const std::size_t min_bytes = std::max<std::size_t>(args.size("min-bytes", 4 << 10), 4);
    const std::size_t max_bytes = args.size("max-bytes", 16 << 20);
    const int iters = static_cast<int>(args.size("iters", 20));
    const int warmup = static_cast<int>(args.size("warmup", 2));
    const std::string algo = args.text("algo", "auto");
    if (max_bytes < min_bytes || iters <= 0) {
      std::fprintf(stderr, "ring_allreduce: want --min-bytes <= --max-bytes and --iters > 0\n");
      return 2;
    }

    vessel::comm world = vessel::comm::init();
    auto made = coll::communicator::create(world.runtime());
    if (!made) {
      std::fprintf(stderr, "ring_allreduce: communicator: %s\n", made.error().message().c_str());
      return 1;
    }
    coll::communicator& c = *made.value();
    const std::uint32_t me = c.rank(), n = c.size();
    vessel::examples::collective_stats colls;

    std::vector<std::size_t> sizes;
    for (std::size_t s = min_bytes; s <= max_bytes; s *= 4) sizes.push_back(s / 4 * 4);
    std::uint64_t total_steps = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) total_steps += std::uint64_t(warmup + iters);
    vessel::examples::progress bar("ring_allreduce", total_steps, me == 0);
    std::uint64_t done_steps = 0;

    vessel::examples::table results(
        {"size", "count", "algorithm", "time us", "algbw GB/s", "busbw GB/s", "check"});
    int wrong = 0;
    double peak_busbw = 0;
    std::string peak_size;
    std::vector<float> in(max_bytes / 4), out(max_bytes / 4), expect(max_bytes / 4);
    for (std::size_t bytes : sizes) {
      const std::size_t count = bytes / 4;
      for (std::size_t i = 0; i < count; ++i) {
        in[i] = input_value(me, i);
        float sum = 0;
        for (std::uint32_t r = 0; r < n; ++r) sum += input_value(r, i);
        expect[i] = sum;
      }
      coll::call_options o;
      o.algorithm = algo;
      o.timeout = std::chrono::seconds{60};
      const auto chosen = c.algorithm_for(coll::collective_op::allreduce, bytes, algo);
      if (!chosen) {
        std::fprintf(stderr, "ring_allreduce: --algo %s: %s\n", algo.c_str(),
                     chosen.error().message().c_str());
        return 2;
      }
      const auto input = std::as_bytes(std::span<const float>(in).first(count));
      const auto output = std::as_writable_bytes(std::span<float>(out).first(count));
      double seconds = 0;
      for (int k = 0; k < warmup + iters; ++k) {
        if (k == warmup) {
          // The barrier picks its own algorithm: --algo names an allreduce one.
          coll::call_options bo;
          bo.timeout = o.timeout;
          if (auto b = c.barrier(bo); !b) throw vessel::comm_error(b.error(), "barrier");
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto r = c.allreduce(input, output, coll::dtype::float32, coll::reduce_op::sum, o);
        const double dt = vessel::examples::collective_stats::seconds_since(t0);
        if (!r) throw vessel::comm_error(r.error(), "allreduce of " + human_bytes(bytes));
        if (k >= warmup) {
          seconds += dt;
          colls.add("allreduce", bytes, dt);
        }
        bar.update(++done_steps);
      }
      std::size_t bad = 0;
      for (std::size_t i = 0; i < count; ++i) {
        if (out[i] != expect[i] && bad++ < 5) {
          std::printf("FAIL rank %u size %s: element %zu is %g, want %g\n", me,
                      human_bytes(bytes).c_str(), i, double(out[i]), double(expect[i]));
        }
      }
      wrong += bad != 0;
      // Every rank's time differs a little; rank 0's stands for the table (nccl-tests does the same
      // per process). Check results are every rank's: the verdict below is summed over ranks.
      const double t = seconds / iters;
      const double algbw = double(bytes) / t / 1e9;
      const double busbw = algbw * 2.0 * double(n - 1) / double(n);
      if (busbw > peak_busbw) {
        peak_busbw = busbw;
        peak_size = std::to_string(bytes);
      }
      results.add({human_bytes(bytes), std::to_string(count), std::string(chosen.value()),
                   fixed(t * 1e6, 1), fixed(algbw, 3), fixed(busbw, 3), bad == 0 ? "ok" : "WRONG"});
    }

    // Everyone learns whether anyone saw a wrong element, so that all ranks exit alike.
    std::vector<std::int32_t> verdict{wrong};
    world.allreduce(std::span<std::int32_t>(verdict), vessel::reduce_op::sum);
    if (me == 0) {
      std::printf("allreduce float32 sum over %u ranks (busbw = algbw * 2(n-1)/n)\n", n);
      results.print();
      std::printf("@summary ring_allreduce ranks=%u sizes=%zu peak_busbw_GBps=%s at_bytes=%s check=%s\n",
                  n, sizes.size(), fixed(peak_busbw, 3).c_str(), peak_size.c_str(),
                  verdict[0] == 0 ? "ok" : "WRONG");
    }
    vessel::examples::print_stats(world, colls);
    made.value().reset();
    world.finalize();
    if (verdict[0] != 0) {
      std::printf("FAIL ring_allreduce rank %u: %d size(s) wrong on some rank\n", me, verdict[0]);
      return 1;
    }
    std::printf("OK ring_allreduce rank %u\n", me);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ring_allreduce: %s\n", e.what());
    return 1;
  }
}
