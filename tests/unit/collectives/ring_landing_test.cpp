// The ring's chunks that land in place (algorithm::landing, used by the communicator to receive
// them straight into the output; algorithm::reducing_landing, to reduce them there as they
// arrive): written (or reduced) into the receiver's output the moment they are sent, the earliest
// a link could land them, in seeded interleavings, the results still equal a serial reference;
// and only the chunks from the left neighbour have a place, reduced ones only out of place.

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

struct reduce_case {
  std::vector<rank_buffers> buffers;
  std::vector<std::int32_t> sums;  // element-wise over the ranks' inputs
};

// Every rank's input of `count` int32 (`elements` per rank in all), random, and their sums.
reduce_case random_inputs(std::uint32_t p, std::size_t elements, std::size_t output_elements,
                          std::uint64_t seed) {
  std::mt19937_64 random{seed * 7919 + p};
  reduce_case c{std::vector<rank_buffers>(p), std::vector<std::int32_t>(elements, 0)};
  for (std::uint32_t r = 0; r < p; ++r) {
    std::vector<std::int32_t> in(elements);
    for (std::size_t i = 0; i < elements; ++i) {
      in[i] = static_cast<std::int32_t>(random() % 20001) - 10000;
      c.sums[i] += in[i];
    }
    c.buffers[r].input = int32_bytes(in);
    c.buffers[r].output.assign(output_elements * sizeof(std::int32_t), std::byte{0x5a});
  }
  return c;
}

TEST(RingLanding, AllreduceChunksReducedWhereTheyLandGiveExactSumsAndAverages) {
  for (const reduce_op op : {reduce_op::sum, reduce_op::avg}) {
    for (const std::uint32_t p : {2u, 3u, 4u, 5u, 8u}) {
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        const std::size_t count = 1000 + p;
        reduce_case c = random_inputs(p, count, count, seed);
        std::vector<std::int32_t> want = c.sums;
        if (op == reduce_op::avg) {
          for (auto& v : want) v /= static_cast<std::int32_t>(p);  // truncates toward zero
        }
        algorithm_params params = ring_params(p, count);
        params.op = op;
        loop_network net{make_ranks<ring_allreduce>(params), std::move(c.buffers), seed};
        net.reduce_landed_chunks(dtype::int32, op);
        ASSERT_FALSE(net.run()) << "p=" << p << " seed=" << seed;
        ASSERT_TRUE(net.all_done()) << "p=" << p << " seed=" << seed;
        // Every chunk of the reduce-scatter half: (p - 1) blocks per rank.
        EXPECT_GT(net.reduced_on_landing(), 0u);
        EXPECT_GT(net.landed(), net.reduced_on_landing()) << "the allgather half still copies";
        for (std::uint32_t r = 0; r < p; ++r) {
          EXPECT_EQ(net.buffers(r).output, int32_bytes(want)) << "p=" << p << " rank " << r;
        }
      }
    }
  }
}

TEST(RingLanding, ReduceScatterReducesOnlyItsLastStepWhereItLands) {
  for (const std::uint32_t p : {2u, 3u, 4u, 6u}) {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      const std::size_t block = 300 + p;  // elements per rank
      reduce_case c = random_inputs(p, block * p, block, seed);
      loop_network net{make_ranks<ring_reduce_scatter>(ring_params(p, block)),
                       std::move(c.buffers), seed};
      net.reduce_landed_chunks(dtype::int32, reduce_op::sum);
      ASSERT_FALSE(net.run()) << "p=" << p << " seed=" << seed;
      ASSERT_TRUE(net.all_done()) << "p=" << p << " seed=" << seed;
      // Each rank's last step brings its own block, in chunks of 256 bytes (those sent to a
      // rank that has not started yet arrive the usual way).
      const std::size_t chunks = (block * sizeof(std::int32_t) + 255) / 256;
      EXPECT_GT(net.reduced_on_landing(), 0u) << "p=" << p;
      EXPECT_LE(net.reduced_on_landing(), p * chunks) << "p=" << p;
      for (std::uint32_t r = 0; r < p; ++r) {
        const std::vector<std::int32_t> want(c.sums.begin() + r * block,
                                             c.sums.begin() + (r + 1) * block);
        EXPECT_EQ(net.buffers(r).output, int32_bytes(want)) << "p=" << p << " rank " << r;
      }
    }
  }
}

TEST(RingLanding, InPlaceAllreduceReducesNothingWhereItLands) {
  // The operand would be the place itself: a chunk landing twice would count twice.
  constexpr std::uint32_t p = 4;
  const std::size_t count = 1000;
  reduce_case c = random_inputs(p, count, 0, 5);
  for (auto& b : c.buffers) {
    b.output = b.input;
    b.input_in_output = 0;
  }
  loop_network net{make_ranks<ring_allreduce>(ring_params(p, count)), std::move(c.buffers), 5};
  net.reduce_landed_chunks(dtype::int32, reduce_op::sum);
  ASSERT_FALSE(net.run());
  ASSERT_TRUE(net.all_done());
  EXPECT_EQ(net.reduced_on_landing(), 0u);
  EXPECT_GT(net.landed(), 0u) << "the copying half lands in place all the same";
  for (std::uint32_t r = 0; r < p; ++r) EXPECT_EQ(net.buffers(r).output, int32_bytes(c.sums));
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

  // The reduce-scatter half is reduced where it lands instead: the output's places, the input's
  // same bytes as the operand; the allgather half has no such place.
  std::size_t reduced = 0;
  for (std::uint32_t step = 0; step < p - 1; ++step) {
    for (std::uint32_t chunk = 0;; ++chunk) {
      const reduce_landing fold = ring.reducing_landing(left, step, chunk);
      if (fold.empty()) break;
      ASSERT_GE(fold.place.data(), out.data());
      ASSERT_LE(fold.place.data() + fold.place.size(), out.data() + out.size());
      ASSERT_EQ(fold.operand.data(), in.data() + (fold.place.data() - out.data()));
      ASSERT_EQ(fold.operand.size(), fold.place.size());
      reduced += fold.place.size();
    }
    EXPECT_TRUE(ring.reducing_landing(right, step, 0).empty());
  }
  EXPECT_EQ(reduced, out.size() - out.size() / p) << "every block but the one it sends first";
  EXPECT_TRUE(ring.reducing_landing(left, p - 1, 0).empty()) << "a copying step";

  ring_reduce_scatter scatter{params};  // every step reduces: nothing lands as it came
  std::vector<std::byte> whole(p * count * 4), block(count * 4);  // count: one rank's block
  std::vector<std::byte> scratch(scatter.scratch_bytes());
  ASSERT_TRUE(scatter.start({whole, block, scratch}, sends));
  for (std::uint32_t step = 0; step < p - 1; ++step) {
    EXPECT_TRUE(scatter.landing(left, step, 0).empty()) << "step " << step;
    // Forwarded steps reduce into the scratch chunk every chunk reuses; the last one, into the
    // output's block.
    EXPECT_EQ(scatter.reducing_landing(left, step, 0).empty(), step + 2 < p) << "step " << step;
  }
  EXPECT_EQ(scatter.reducing_landing(left, p - 2, 0).place.data(), block.data());
}

}  // namespace
}  // namespace vessel::collectives
