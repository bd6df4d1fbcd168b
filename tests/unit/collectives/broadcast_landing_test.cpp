// The broadcasts' chunks that land in place (algorithm::landing): every chunk from the parent
// is written into the receiver's output the moment it is sent, in seeded interleavings, and
// every rank still ends with the root's input; only chunks from the parent have a place.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "collectives/algorithms/binomial_broadcast.hpp"
#include "collectives/algorithms/chain_broadcast.hpp"
#include "tests/unit/collectives/loop_network.hpp"

namespace vessel::collectives {
namespace {

using testing::loop_network;
using testing::make_ranks;
using testing::rank_buffers;

algorithm_params broadcast_params(std::uint32_t p, std::uint32_t root, std::size_t count) {
  algorithm_params params;
  params.size = p;
  params.root = root;
  params.count = count;
  params.type = dtype::int32;
  params.chunk_bytes = 256;  // many chunks, the last one short
  return params;
}

// Runs the broadcast with landing on; the chunks that landed (none when the root sent them all
// before its children started, which some seeds' start orders do).
template <class Broadcast>
std::size_t run_landing(std::uint32_t p, std::uint32_t root, std::uint64_t seed) {
  const std::size_t count = 1000 + p;
  std::vector<std::byte> message(count * sizeof(std::int32_t));
  for (std::size_t i = 0; i < count; ++i) {
    const std::int32_t v = static_cast<std::int32_t>(i * 7 + root);
    std::memcpy(message.data() + i * sizeof v, &v, sizeof v);
  }
  std::vector<rank_buffers> buffers(p);
  for (std::uint32_t r = 0; r < p; ++r) {
    if (r == root) buffers[r].input = message;
    buffers[r].output.assign(message.size(), std::byte{0x5a});
  }
  loop_network net{make_ranks<Broadcast>(broadcast_params(p, root, count)), std::move(buffers),
                   seed};
  net.land_chunks(true);
  EXPECT_FALSE(net.run()) << "p=" << p << " root=" << root << " seed=" << seed;
  EXPECT_TRUE(net.all_done()) << "p=" << p << " root=" << root << " seed=" << seed;
  for (std::uint32_t r = 0; r < p; ++r) {
    EXPECT_EQ(net.buffers(r).output, message) << "p=" << p << " root=" << root << " rank " << r;
  }
  return net.landed();
}

TEST(BroadcastLanding, ChainChunksLandInTheOutputAndEveryRankGetsTheMessage) {
  for (const std::uint32_t p : {2u, 3u, 5u, 8u}) {
    std::size_t landed = 0;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      landed += run_landing<chain_broadcast>(p, p / 2, seed);
    }
    EXPECT_GT(landed, 0u) << "p=" << p;
  }
}

TEST(BroadcastLanding, BinomialChunksLandInTheOutputAndEveryRankGetsTheMessage) {
  for (const std::uint32_t p : {2u, 4u, 6u, 8u}) {
    std::size_t landed = 0;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      landed += run_landing<binomial_broadcast>(p, 1, seed);
    }
    EXPECT_GT(landed, 0u) << "p=" << p;
  }
}

TEST(BroadcastLanding, OnlyChunksFromTheParentHaveAPlace) {
  constexpr std::uint32_t p = 4;
  const std::size_t count = 1000;  // 4000 bytes: 16 chunks of 256 bytes, the last one short
  algorithm_params params = broadcast_params(p, 0, count);
  params.rank = 1;  // chain 0 -> 1 -> 2 -> 3: parent 0, child 2
  chain_broadcast mid{params};
  std::vector<std::byte> out(count * 4);
  EXPECT_TRUE(mid.landing(0, 0, 0).empty()) << "no place before start()";
  std::vector<send_step> sends;
  ASSERT_TRUE(mid.start({{}, out, {}}, sends));
  std::size_t covered = 0;
  for (std::uint32_t chunk = 0;; ++chunk) {
    const std::span<std::byte> place = mid.landing(0, 0, chunk);
    if (place.empty()) break;
    EXPECT_EQ(place.data(), out.data() + covered) << "chunk " << chunk;
    covered += place.size();
  }
  EXPECT_EQ(covered, out.size());
  EXPECT_TRUE(mid.landing(2, 0, 0).empty()) << "the child sends us nothing";
  EXPECT_TRUE(mid.landing(0, 1, 0).empty()) << "no such step";

  params.rank = 0;
  chain_broadcast root{params};
  std::vector<std::byte> in(count * 4), root_out(count * 4);
  ASSERT_TRUE(root.start({in, root_out, {}}, sends));
  EXPECT_TRUE(root.landing(3, 0, 0).empty()) << "the root receives nothing";
}

}  // namespace
}  // namespace vessel::collectives
