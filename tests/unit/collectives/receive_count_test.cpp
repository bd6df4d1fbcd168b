// algorithm::chunks_to_receive: the ring schedules and the tree broadcasts say ahead how many
// chunks each rank receives, and the communicator posts exactly that many receives. A count one
// too high leaves a receive to cancel; one too low leaves a chunk with nowhere to go and the
// collective hangs. Here every rank's count, read right after start(), equals what the rank
// consumed by the end, over world sizes, counts that split unevenly (empty blocks included),
// chunk sizes and, for a broadcast, sizes on both sides of its rendezvous (each child's ready
// message counts).

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/algorithms/binomial_broadcast.hpp"
#include "collectives/algorithms/chain_broadcast.hpp"
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

enum class layout : std::uint8_t { allreduce, reduce_scatter, allgather, broadcast };

// params.count is the whole vector for allreduce and broadcast, one rank's block for the others.
std::vector<rank_buffers> buffers_for(layout l, std::uint32_t p, std::size_t count) {
  const std::size_t one = count * sizeof(std::int32_t);
  std::vector<rank_buffers> buffers(p);
  for (rank_buffers& b : buffers) {
    b.input.assign(l == layout::reduce_scatter ? one * p : one, std::byte{1});
    b.output.assign(l == layout::allgather ? one * p : one, std::byte{0});
  }
  return buffers;
}

template <class Algorithm>
void expect_counts_match(layout l, std::initializer_list<std::size_t> counts,
                         std::initializer_list<std::size_t> chunk_sizes) {
  for (const std::uint32_t p : {1u, 2u, 3u, 4u, 5u, 8u}) {
    for (const std::size_t count : counts) {
      for (const std::size_t chunk_bytes : chunk_sizes) {
        algorithm_params params;
        params.size = p;
        params.root = p - 1;  // not rank 0, for the algorithms with a root
        params.count = count;
        params.type = dtype::int32;
        params.op = reduce_op::sum;
        params.chunk_bytes = chunk_bytes;
        loop_network net{make_ranks<Algorithm>(params), buffers_for(l, p, count), p + count};
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

constexpr std::initializer_list<std::size_t> small_counts{0, 1, 7, 1005};
constexpr std::initializer_list<std::size_t> small_and_whole_chunks{64, std::size_t{1} << 20};
// 512 KiB + 20 B of int32: from tree_broadcast::rendezvous_bytes each child first tells its
// parent it is ready, one more message for the parent.
constexpr std::size_t past_rendezvous = tree_broadcast::rendezvous_bytes / 4 + 5;
constexpr std::initializer_list<std::size_t> rendezvous_chunks{std::size_t{64} << 10,
                                                               std::size_t{1} << 20};

TEST(ReceiveCount, RingAllreduceCountsEveryChunkItReceives) {
  expect_counts_match<ring_allreduce>(layout::allreduce, small_counts, small_and_whole_chunks);
}

TEST(ReceiveCount, RingReduceScatterCountsEveryChunkItReceives) {
  expect_counts_match<ring_reduce_scatter>(layout::reduce_scatter, small_counts,
                                           small_and_whole_chunks);
}

TEST(ReceiveCount, RingAllgatherCountsEveryChunkItReceives) {
  expect_counts_match<ring_allgather>(layout::allgather, small_counts, small_and_whole_chunks);
}

TEST(ReceiveCount, BinomialBroadcastCountsChunksAndReadyMessages) {
  expect_counts_match<binomial_broadcast>(layout::broadcast, small_counts, small_and_whole_chunks);
  expect_counts_match<binomial_broadcast>(layout::broadcast, {past_rendezvous}, rendezvous_chunks);
}

TEST(ReceiveCount, ChainBroadcastCountsChunksAndReadyMessages) {
  expect_counts_match<chain_broadcast>(layout::broadcast, small_counts, small_and_whole_chunks);
  expect_counts_match<chain_broadcast>(layout::broadcast, {past_rendezvous}, rendezvous_chunks);
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
