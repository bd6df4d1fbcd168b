// algorithm::chunks_to_receive: the ring schedules say ahead how many chunks each rank receives,
// and the communicator posts exactly that many receives. A count one too high leaves a receive
// to cancel; one too low leaves a chunk with nowhere to go and the collective hangs. Here every
// rank's count, read right after start(), equals what the rank consumed by the end, over world
// sizes, counts that split unevenly (empty blocks included) and chunk sizes.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/algorithms/recursive_doubling_allreduce.hpp"
#include "collectives/algorithms/ring_allgather.hpp"
#include "collectives/algorithms/ring_allreduce.hpp"
#include "collectives/algorithms/ring_reduce_scatter.hpp"
#include "tests/unit/collectives/loop_network.hpp"

namespace vessel::collectives {
namespace {

using testing::loop_network;
using testing::make_ranks;
using testing::rank_buffers;

enum class layout : std::uint8_t { allreduce, reduce_scatter, allgather };

// params.count is the whole vector for allreduce, one rank's block for the other two.
std::vector<rank_buffers> buffers_for(layout l, std::uint32_t p, std::size_t count) {
  const std::size_t one = count * sizeof(std::int32_t);
  std::vector<rank_buffers> buffers(p);
  for (rank_buffers& b : buffers) {
    b.input.assign(l == layout::reduce_scatter ? one * p : one, std::byte{1});
    b.output.assign(l == layout::allgather ? one * p : one, std::byte{0});
  }
  return buffers;
}

template <class Ring>
void expect_counts_match(layout l) {
  for (const std::uint32_t p : {1u, 2u, 3u, 4u, 5u, 8u}) {
    for (const std::size_t count :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000} + p}) {
      for (const std::size_t chunk_bytes : {std::size_t{64}, std::size_t{1} << 20}) {
        algorithm_params params;
        params.size = p;
        params.count = count;
        params.type = dtype::int32;
        params.op = reduce_op::sum;
        params.chunk_bytes = chunk_bytes;
        loop_network net{make_ranks<Ring>(params), buffers_for(l, p, count), p + count};
        std::vector<std::uint64_t> counted(p);
        for (std::uint32_t r = 0; r < p; ++r) {
          ASSERT_FALSE(net.start(r));
          const std::optional<std::uint64_t> c = net.rank(r).chunks_to_receive();
          ASSERT_TRUE(c.has_value()) << "rank " << r;
          counted[r] = *c;
        }
        ASSERT_FALSE(net.deliver());
        ASSERT_TRUE(net.all_done());
        for (std::uint32_t r = 0; r < p; ++r) {
          EXPECT_EQ(counted[r], net.delivered_to(r))
              << "p=" << p << " count=" << count << " chunk_bytes=" << chunk_bytes << " rank " << r;
        }
      }
    }
  }
}

TEST(ReceiveCount, RingAllreduceCountsEveryChunkItReceives) {
  expect_counts_match<ring_allreduce>(layout::allreduce);
}

TEST(ReceiveCount, RingReduceScatterCountsEveryChunkItReceives) {
  expect_counts_match<ring_reduce_scatter>(layout::reduce_scatter);
}

TEST(ReceiveCount, RingAllgatherCountsEveryChunkItReceives) {
  expect_counts_match<ring_allgather>(layout::allgather);
}

TEST(ReceiveCount, AnAlgorithmThatCannotCountSaysSo) {
  algorithm_params params;
  params.size = 4;
  params.count = 16;
  const recursive_doubling_allreduce algo{params};
  EXPECT_FALSE(algo.chunks_to_receive().has_value());
}

}  // namespace
}  // namespace vessel::collectives
