// The per-chunk path of the allreduce family and the allgathers (on_receive through step_driver,
// reduce, forward) allocates nothing once a driver has run one collective. Its own executable
// because it replaces the global operator new to count calls.

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/algorithms/rabenseifner_allreduce.hpp"
#include "collectives/algorithms/recursive_doubling_allgather.hpp"
#include "collectives/algorithms/recursive_doubling_allreduce.hpp"
#include "collectives/algorithms/ring_allgather.hpp"
#include "collectives/algorithms/ring_allreduce.hpp"
#include "collectives/algorithms/ring_reduce_scatter.hpp"
#include "collectives/sim/driver.hpp"

#include "tests/support/counting_new.hpp"

namespace vessel::collectives {
namespace {

/// A received chunk seen in place in the arena (a pooled slice in the real driver).
struct view_payload {
  const std::byte* bytes;
  std::size_t length;
  const std::byte* data() const noexcept { return bytes; }
  std::size_t size() const noexcept { return length; }
};

struct message {
  std::uint32_t src, dst, step, chunk;
  std::size_t at, bytes;
};

template <class A>
struct world {
  std::uint32_t p;
  algorithm_params params;
  std::vector<std::vector<std::byte>> inputs, outputs, scratch;
  std::vector<std::unique_ptr<A>> algos;
  std::vector<step_driver<view_payload>> drivers;
  std::vector<message> wire;     // every message, in emission order (FIFO per link)
  std::vector<std::byte> arena;  // their bytes

  world(std::uint32_t size, std::size_t in_elements, std::size_t out_elements,
        algorithm_params base)
      : p(size), params(base) {
    params.size = size;
    for (std::uint32_t r = 0; r < p; ++r) {
      inputs.emplace_back(in_elements * 4);
      for (std::size_t i = 0; i < in_elements; ++i) {
        const std::int32_t v = static_cast<std::int32_t>(r + i);
        std::memcpy(inputs[r].data() + i * 4, &v, 4);
      }
      outputs.emplace_back(out_elements * 4);
    }
    wire.reserve(1 << 16);
    arena.reserve(std::size_t{1} << 24);
  }

  algorithm_buffers buffers(std::uint32_t r) { return {inputs[r], outputs[r], scratch[r]}; }

  /// Fresh algorithms, started (set-up may allocate); drivers created or rebound.
  void start() {
    algos.clear();
    scratch.clear();
    wire.clear();
    arena.clear();
    for (std::uint32_t r = 0; r < p; ++r) {
      params.rank = r;
      algos.push_back(std::make_unique<A>(params));
      scratch.emplace_back(algos.back()->scratch_bytes());
    }
    for (std::uint32_t r = 0; r < p; ++r) {
      if (drivers.size() < p) {
        drivers.emplace_back(*algos[r], buffers(r));
      } else {
        drivers[r].rebind(*algos[r], buffers(r));
      }
    }
    for (std::uint32_t r = 0; r < p; ++r) ASSERT_TRUE(drivers[r].start(emitter(r)));
  }

  auto emitter(std::uint32_t src) {
    return [this, src](const send_step& s, std::span<const std::byte> b) {
      wire.push_back({src, s.peer, s.step, s.chunk, arena.size(), b.size()});
      arena.insert(arena.end(), b.begin(), b.end());
    };
  }

  /// Delivers every message in emission order until none is left.
  void run() {
    for (std::size_t i = 0; i < wire.size(); ++i) {
      const message m = wire[i];
      ASSERT_TRUE(drivers[m.dst].deliver(
          m.src, m.step, m.chunk, view_payload{arena.data() + m.at, m.bytes}, emitter(m.dst)));
    }
    for (std::uint32_t r = 0; r < p; ++r) ASSERT_TRUE(drivers[r].done()) << r;
  }
};

template <class A>
std::uint64_t allocations_of_second_run(std::uint32_t p, std::size_t in_elements,
                                        std::size_t out_elements, std::size_t count,
                                        std::int32_t expect_first) {
  algorithm_params base;
  base.count = count;
  base.type = dtype::int32;
  base.op = reduce_op::sum;
  base.chunk_bytes = 64;
  world<A> w(p, in_elements, out_elements, base);
  w.start();
  w.run();  // warm-up: drivers' lists reach their working size
  w.start();
  const std::uint64_t before = vessel::test::allocations();
  w.run();
  const std::uint64_t allocations = vessel::test::allocations() - before;
  std::int32_t first;
  std::memcpy(&first, w.outputs[p - 1].data(), 4);
  EXPECT_EQ(first, expect_first);
  return allocations;
}

TEST(CollectivesAlloc, TheCounterSeesAllocations) {
  const std::uint64_t before = vessel::test::allocations();
  auto held = std::make_unique<std::vector<int>>(10);
  EXPECT_EQ(vessel::test::allocations() - before, 2u);  // the vector object and its elements
}

TEST(CollectivesAlloc, AllreducesAllocateNothingPerChunk) {
  // Element 0 of the sum over ranks of (rank + i) is 0 + 1 + ... + (p - 1).
  const std::uint32_t p = 6;
  const std::int32_t sum = p * (p - 1) / 2;
  EXPECT_EQ((allocations_of_second_run<ring_allreduce>(p, 1000, 1000, 1000, sum)), 0u);
  EXPECT_EQ((allocations_of_second_run<recursive_doubling_allreduce>(p, 1000, 1000, 1000, sum)),
            0u);
  EXPECT_EQ((allocations_of_second_run<rabenseifner_allreduce>(p, 1000, 1000, 1000, sum)), 0u);
}

TEST(CollectivesAlloc, ReduceScatterAndAllgathersAllocateNothingPerChunk) {
  const std::uint32_t p = 5;
  // reduce_scatter: rank p-1 holds block p-1 of the sum, element 0 = sum over r of r + (p-1)*100.
  const std::int32_t rs_first = p * (p - 1) / 2 + p * (p - 1) * 100;
  EXPECT_EQ((allocations_of_second_run<ring_reduce_scatter>(p, 500, 100, 100, rs_first)), 0u);
  // allgather: element 0 of every output is rank 0's element 0.
  EXPECT_EQ((allocations_of_second_run<ring_allgather>(p, 100, 500, 100, 0)), 0u);
  EXPECT_EQ((allocations_of_second_run<recursive_doubling_allgather>(p, 100, 500, 100, 0)), 0u);
}

}  // namespace
}  // namespace vessel::collectives
