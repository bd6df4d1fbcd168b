// Large broadcasts go out only to children that said they are ready (tree_broadcast's
// rendezvous): the root sends nothing before a child's ready, then everything it has; a ready
// that is doubled, from a stranger, with bytes, or below the threshold breaks the protocol; the
// hang report names the children not yet ready; seeded interleavings still give every rank the
// root's message.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/algorithms/binomial_broadcast.hpp"
#include "collectives/algorithms/chain_broadcast.hpp"
#include "collectives/errc.hpp"
#include "tests/unit/collectives/loop_network.hpp"

namespace vessel::collectives {
namespace {

using testing::loop_network;
using testing::make_ranks;
using testing::rank_buffers;

constexpr std::size_t large = tree_broadcast::rendezvous_bytes;  // bytes: a rendezvous message
constexpr std::uint32_t ready = tree_broadcast::ready_step;

algorithm_params params_of(std::uint32_t p, std::uint32_t rank, std::size_t bytes) {
  algorithm_params params;
  params.rank = rank;
  params.size = p;
  params.root = 0;
  params.count = bytes / 4;
  params.type = dtype::int32;
  params.chunk_bytes = bytes / 4;  // four chunks
  return params;
}

TEST(BroadcastRendezvous, TheRootSendsAChildNothingBeforeItIsReadyThenEverything) {
  std::vector<std::byte> in(large, std::byte{1}), out(large);
  chain_broadcast root{params_of(3, 0, large)};  // chain 0 -> 1 -> 2
  std::vector<send_step> sends;
  ASSERT_TRUE(root.start({in, out, {}}, sends));
  EXPECT_TRUE(sends.empty());
  EXPECT_FALSE(root.done());
  std::vector<std::uint32_t> awaited;
  root.waiting_for(awaited);
  EXPECT_EQ(awaited, std::vector<std::uint32_t>{1});

  auto status = root.on_receive(1, ready, 0, {}, sends);
  ASSERT_TRUE(status);
  EXPECT_EQ(status.value(), receive_status::consumed);
  ASSERT_EQ(sends.size(), 4u);
  for (std::uint32_t c = 0; c < 4; ++c) {
    EXPECT_EQ(sends[c].peer, 1u);
    EXPECT_EQ(sends[c].step, tree_broadcast::data_step);
    EXPECT_EQ(sends[c].chunk, c);
    EXPECT_EQ(sends[c].buffer, buffer_id::input);
  }
  EXPECT_TRUE(root.done());
}

TEST(BroadcastRendezvous, AChildSaysReadyFirstAndForwardsOnlyOnceItsOwnChildIsReady) {
  std::vector<std::byte> out(large);
  chain_broadcast mid{params_of(3, 1, large)};
  std::vector<send_step> sends;
  ASSERT_TRUE(mid.start({{}, out, {}}, sends));
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].peer, 0u);
  EXPECT_EQ(sends[0].step, ready);
  EXPECT_EQ(sends[0].bytes, 0u);
  sends.clear();
  const std::vector<std::byte> chunk(large / 4, std::byte{7});
  ASSERT_TRUE(mid.on_receive(0, tree_broadcast::data_step, 0, chunk, sends));
  EXPECT_TRUE(sends.empty()) << "rank 2 is not ready yet";
  ASSERT_TRUE(mid.on_receive(2, ready, 0, {}, sends));
  ASSERT_EQ(sends.size(), 1u) << "what it missed: chunk 0";
  EXPECT_EQ(sends[0].peer, 2u);
  EXPECT_EQ(sends[0].buffer, buffer_id::output);
  sends.clear();
  ASSERT_TRUE(mid.on_receive(0, tree_broadcast::data_step, 1, chunk, sends));
  EXPECT_EQ(sends.size(), 1u) << "ready now: forwarded at once";
}

TEST(BroadcastRendezvous, ABrokenReadyIsAProtocolViolation) {
  const auto violation = make_error_code(errc::protocol_violation);
  std::vector<std::byte> in(large), out(large);
  std::vector<send_step> sends;
  const std::vector<std::byte> one(1);
  {
    chain_broadcast root{params_of(3, 0, large)};
    ASSERT_TRUE(root.start({in, out, {}}, sends));
    ASSERT_TRUE(root.on_receive(1, ready, 0, {}, sends));
    EXPECT_EQ(root.on_receive(1, ready, 0, {}, sends).error(), violation) << "twice";
  }
  {
    chain_broadcast root{params_of(3, 0, large)};
    ASSERT_TRUE(root.start({in, out, {}}, sends));
    EXPECT_EQ(root.on_receive(2, ready, 0, {}, sends).error(), violation) << "not a child";
    EXPECT_EQ(root.on_receive(1, ready, 0, one, sends).error(), violation) << "with bytes";
    EXPECT_EQ(root.on_receive(1, ready, 1, {}, sends).error(), violation) << "chunk 1";
  }
  {
    const std::size_t small = large / 2;
    std::vector<std::byte> small_in(small), small_out(small);
    chain_broadcast root{params_of(3, 0, small)};
    ASSERT_TRUE(root.start({small_in, small_out, {}}, sends));
    EXPECT_EQ(root.on_receive(1, ready, 0, {}, sends).error(), violation) << "eager: no ready";
  }
}

template <class Broadcast>
void run_rendezvous(std::uint32_t p, std::uint64_t seed) {
  const std::size_t bytes = large + 4 * p;  // the last chunk short
  std::vector<std::byte> message(bytes);
  for (std::size_t i = 0; i < bytes; ++i) message[i] = static_cast<std::byte>((i * 31 + p) & 0xff);
  std::vector<rank_buffers> buffers(p);
  buffers[0].input = message;
  for (auto& b : buffers) b.output.assign(bytes, std::byte{0});
  algorithm_params params = params_of(p, 0, bytes);
  params.chunk_bytes = 64 << 10;
  loop_network net{make_ranks<Broadcast>(params), std::move(buffers), seed};
  net.land_chunks(true);
  ASSERT_FALSE(net.run()) << "p=" << p << " seed=" << seed;
  ASSERT_TRUE(net.all_done()) << "p=" << p << " seed=" << seed;
  for (std::uint32_t r = 0; r < p; ++r) {
    EXPECT_EQ(net.buffers(r).output, message) << "p=" << p << " seed=" << seed << " rank " << r;
  }
}

TEST(BroadcastRendezvous, EveryRankGetsTheMessageInSeededInterleavings) {
  for (const std::uint32_t p : {2u, 3u, 5u, 8u}) {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      run_rendezvous<chain_broadcast>(p, seed);
      run_rendezvous<binomial_broadcast>(p, seed);
    }
  }
}

}  // namespace
}  // namespace vessel::collectives
