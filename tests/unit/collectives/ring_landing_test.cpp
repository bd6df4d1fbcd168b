// The ring's chunks that land in place (algorithm::landing, used by the communicator to receive
// them straight into the output): written into the receiver's output the moment they are sent,
// the earliest a link could land them, in seeded interleavings, the results still equal a serial
// reference; and only the copying steps' chunks from the left neighbour have a place.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "collectives/algorithms/ring_allgather.hpp"
#include "collectives/algorithms/ring_allreduce.hpp"
#include "collectives/algorithms/ring_reduce_scatter.hpp"
#include "tests/unit/collectives/loop_network.hpp"

namespace vessel::collectives {
namespace {

using testing::loop_network;
using testing::make_ranks;
using testing::rank_buffers;

std::vector<std::byte> int32_bytes(const std::vector<std::int32_t>& v) {
  std::vector<std::byte> out(v.size() * sizeof(std::int32_t));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

algorithm_params ring_params(std::uint32_t p, std::size_t count) {
  algorithm_params params;
  params.size = p;
  params.count = count;
  params.type = dtype::int32;
  params.op = reduce_op::sum;
  params.chunk_bytes = 256;  // many chunks per block, the last one short
  return params;
}

// Runs the ring with landing on and checks that chunks landed and every rank ended with `want`.
template <class Ring>
void run_landing(std::uint32_t p, std::size_t count, std::vector<rank_buffers> buffers,
                 const std::vector<std::int32_t>& want, std::uint64_t seed) {
  loop_network net{make_ranks<Ring>(ring_params(p, count)), std::move(buffers), seed};
  net.land_chunks(true);
  ASSERT_FALSE(net.run()) << "p=" << p << " seed=" << seed;
  ASSERT_TRUE(net.all_done()) << "p=" << p << " seed=" << seed;
  EXPECT_GT(net.landed(), 0u) << "p=" << p << " seed=" << seed;
  for (std::uint32_t r = 0; r < p; ++r) {
    EXPECT_EQ(net.buffers(r).output, int32_bytes(want)) << "p=" << p << " rank " << r;
  }
}

TEST(RingLanding, AllreduceChunksLandInTheOutputAndTheSumsStayExact) {
  for (const std::uint32_t p : {2u, 3u, 4u, 5u, 8u}) {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const std::size_t count = 1000 + p;  // blocks of unequal size
      std::mt19937_64 random{seed * 7919 + p};
      std::vector<rank_buffers> buffers(p);
      std::vector<std::int32_t> want(count, 0);
      for (std::uint32_t r = 0; r < p; ++r) {
        std::vector<std::int32_t> in(count);
        for (std::size_t i = 0; i < count; ++i) {
          in[i] = static_cast<std::int32_t>(random() % 20001) - 10000;
          want[i] += in[i];
        }
        buffers[r].input = int32_bytes(in);
        buffers[r].output.assign(count * sizeof(std::int32_t), std::byte{0x5a});
      }
      run_landing<ring_allreduce>(p, count, std::move(buffers), want, seed);
    }
  }
}

TEST(RingLanding, AllgatherChunksLandInTheOutputAndEveryBlockArrives) {
  for (const std::uint32_t p : {2u, 3u, 4u, 7u}) {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const std::size_t block = 300 + p;  // elements per rank
      std::vector<rank_buffers> buffers(p);
      std::vector<std::int32_t> want(block * p);
      for (std::uint32_t r = 0; r < p; ++r) {
        std::vector<std::int32_t> in(block);
        for (std::size_t i = 0; i < block; ++i) {
          in[i] = static_cast<std::int32_t>(r * 100000 + i);
          want[r * block + i] = in[i];
        }
        buffers[r].input = int32_bytes(in);
        buffers[r].output.assign(want.size() * sizeof(std::int32_t), std::byte{0x5a});
      }
      run_landing<ring_allgather>(p, block, std::move(buffers), want, seed);
    }
  }
}

TEST(RingLanding, OnlyTheCopyingStepsFromTheLeftHaveAPlace) {
  constexpr std::uint32_t p = 4;
  const std::size_t count = 1024;
  algorithm_params params = ring_params(p, count);
  params.rank = 1;
  ring_allreduce ring{params};
  std::vector<std::byte> in(count * 4), out(count * 4);
  const std::uint32_t left = 0, right = 2;
  EXPECT_TRUE(ring.landing(left, p - 1, 0).empty()) << "no place before start()";

  std::vector<send_step> sends;
  ASSERT_TRUE(ring.start({in, out, {}}, sends));
  for (std::uint32_t step = 0; step < p - 1; ++step) {  // reduce-scatter: reduced, not copied
    EXPECT_TRUE(ring.landing(left, step, 0).empty()) << "step " << step;
  }
  std::size_t covered = 0;
  for (std::uint32_t step = p - 1; step < 2 * (p - 1); ++step) {  // allgather half
    for (std::uint32_t chunk = 0;; ++chunk) {
      const std::span<std::byte> place = ring.landing(left, step, chunk);
      if (place.empty()) break;
      ASSERT_GE(place.data(), out.data());
      ASSERT_LE(place.data() + place.size(), out.data() + out.size());
      covered += place.size();
    }
    EXPECT_TRUE(ring.landing(right, step, 0).empty()) << "only the left neighbour sends to us";
  }
  // The allgather half brings every block but the one this rank finished itself.
  EXPECT_EQ(covered, out.size() - out.size() / p);
  EXPECT_TRUE(ring.landing(left, 2 * (p - 1), 0).empty()) << "no such step";

  ring_reduce_scatter scatter{params};  // every step reduces: nothing lands
  std::vector<std::byte> whole(p * count * 4), block(count * 4);  // count: one rank's block
  std::vector<std::byte> scratch(scatter.scratch_bytes());
  ASSERT_TRUE(scatter.start({whole, block, scratch}, sends));
  for (std::uint32_t step = 0; step < p - 1; ++step) {
    EXPECT_TRUE(scatter.landing(left, step, 0).empty()) << "step " << step;
  }
}

}  // namespace
}  // namespace vessel::collectives
