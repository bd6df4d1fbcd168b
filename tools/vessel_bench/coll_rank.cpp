// One rank of `vessel-bench coll` (tools/vessel_bench/coll.cpp starts N of these, as a launcher
// would: VESSEL_RANK, VESSEL_WORLD_SIZE, VESSEL_STORE, VESSEL_TOKEN, VESSEL_TRANSPORT). It runs
// allreduce, broadcast, allgather and reduce_scatter of float32 sums through a
// collectives::communicator, and rank 0 prints one line per (operation, size):
//
//   R <op> <size_bytes> <algorithm> <seconds per call, slowest rank>
//
// bench/peers/mpi_coll.cpp prints the same lines for Open MPI (algorithm "mpi"), so both sides
// are timed the same way: warm-up calls, a barrier, `iterations` calls, each rank's mean, the
// maximum over ranks. size_bytes is nccl-tests' size: the whole vector for allreduce and
// broadcast, the whole output of allgather, the whole input of reduce_scatter.
// VESSEL_ALGO_<OP> forces an algorithm (the thresholds in docs/collective_algorithms.md were
// measured that way).
//
//   vessel-bench-coll-rank <sizes,comma,separated> <iterations or 0 for the default>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "actors/comm.hpp"
#include "collectives/communicator.hpp"
#include "tools/vessel_bench/coll_plan.hpp"

namespace {

using namespace vessel::collectives;
using vessel::bench::coll_plan;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: vessel-bench-coll-rank SIZES ITERATIONS\n");
    return 2;
  }
  try {
    vessel::comm world = vessel::comm::init();
    auto made = communicator::create(world.runtime());
    if (!made) {
      std::fprintf(stderr, "communicator: %s\n", made.error().message().c_str());
      return 1;
    }
    communicator& c = *made.value();
    const std::uint32_t p = c.size();
    const coll_plan plan{argv[1], static_cast<std::size_t>(std::atol(argv[2])), p};
    if (plan.sizes.empty()) {
      std::fprintf(stderr, "bad sizes '%s'\n", argv[1]);
      return 2;
    }
    // Touched once, reused by every call (first-touch page faults are not what is measured).
    const std::size_t largest = plan.largest_buffer_bytes();
    std::vector<std::byte> in(largest), out(largest);
    std::fill(in.begin(), in.end(), std::byte{0});
    std::fill(out.begin(), out.end(), std::byte{0});
    const auto ops = vessel::bench::selected_coll_ops_from_env();
    if (ops.empty()) {
      std::fprintf(stderr, "VESSEL_BENCH_COLL_OPS: not a list of operations\n");
      return 2;
    }
    for (const std::string_view op_name : ops) {
      const collective_op op = *parse_collective_op(op_name);
      for (const std::size_t size : plan.sizes) {
        const coll_plan::shape s = plan.shape_of(size);
        const std::size_t whole = s.whole_elements * 4, block = s.block_elements * 4;
        auto call = [&]() -> vessel::result<void> {
          switch (op) {
            case collective_op::allreduce:
              return c.allreduce(std::span(in).first(whole), std::span(out).first(whole),
                                 dtype::float32, reduce_op::sum);
            case collective_op::broadcast:
              // The root sends from the buffer it receives into.
              return c.broadcast(std::span(out).first(whole), std::span(out).first(whole),
                                 dtype::float32);
            case collective_op::allgather:
              return c.allgather(std::span(in).first(block), std::span(out).first(block * p),
                                 dtype::float32);
            case collective_op::reduce_scatter:
              return c.reduce_scatter(std::span(in).first(block * p), std::span(out).first(block),
                                      dtype::float32, reduce_op::sum);
            default: return vessel::outcome::success();
          }
        };
        const std::size_t message_bytes = op == collective_op::allreduce ||
                                                  op == collective_op::broadcast
                                              ? whole
                                              : block;
        const auto algorithm = c.algorithm_for(op, message_bytes);
        for (std::size_t i = 0; i < plan.warmup(size); ++i) {
          if (auto r = call(); !r) {
            std::fprintf(stderr, "%s %zu: %s\n", op_name.data(), size, r.error().message().c_str());
            return 1;
          }
        }
        world.barrier();
        const std::size_t iterations = plan.iterations_for(size);
        const double t0 = now_s();
        for (std::size_t i = 0; i < iterations; ++i) {
          if (auto r = call(); !r) {
            std::fprintf(stderr, "%s %zu: %s\n", op_name.data(), size, r.error().message().c_str());
            return 1;
          }
        }
        double per_call[1] = {(now_s() - t0) / static_cast<double>(iterations)};
        world.allreduce(std::span<double>(per_call), vessel::reduce_op::max);
        if (c.rank() == 0) {
          std::printf("R %.*s %zu %.*s %.9g\n", static_cast<int>(op_name.size()), op_name.data(),
                      size, algorithm ? static_cast<int>(algorithm.value().size()) : 1,
                      algorithm ? algorithm.value().data() : "?", per_call[0]);
          std::fflush(stdout);
        }
      }
    }
    made.value().reset();
    world.finalize();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vessel-bench-coll-rank: %s\n", e.what());
    return 1;
  }
}
