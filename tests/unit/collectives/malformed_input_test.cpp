// A chunk that an algorithm can never accept (wrong peer, wrong step, wrong size, a duplicate,
// a gap, a chunk index out of range) is a protocol_violation error, never a crash or a silent
// corruption; bad parameters and short buffers are errors from start().

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "collectives/algorithms/binomial_broadcast.hpp"
#include "collectives/algorithms/binomial_gather.hpp"
#include "collectives/algorithms/binomial_reduce.hpp"
#include "collectives/algorithms/binomial_scatter.hpp"
#include "collectives/algorithms/chain_broadcast.hpp"
#include "collectives/algorithms/dissemination_barrier.hpp"
#include "collectives/algorithms/pairwise_alltoall.hpp"
#include "collectives/errc.hpp"

namespace vessel::collectives {
namespace {

const std::error_code violation = make_error_code(errc::protocol_violation);

std::vector<std::byte> bytes(std::size_t n) {
  return std::vector<std::byte>(n);
}

/// One started instance with generous buffers.
struct instance {
  std::unique_ptr<algorithm> algo;
  std::vector<std::byte> input = bytes(4096), output = bytes(4096), scratch;
  std::vector<send_step> out;

  explicit instance(std::unique_ptr<algorithm> a) : algo(std::move(a)) {
    scratch.resize(algo->scratch_bytes());
    EXPECT_TRUE(algo->start({input, output, scratch}, out));
  }
  std::error_code offer(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                        std::size_t n) {
    const auto data = bytes(n);
    out.clear();
    auto r = algo->on_receive(peer, step, chunk, data, out);
    return r ? std::error_code{} : r.error();
  }
};

// 8 ranks, root 0, 10 int32 in 16-byte chunks: 3 chunks of 16, 16, 8 bytes.
algorithm_params at(std::uint32_t rank) {
  return {rank, 8, 0, 10, dtype::int32, reduce_op::sum, 16};
}

TEST(malformed_input, broadcast_accepts_only_the_parent_in_order_with_the_right_sizes) {
  for (int kind = 0; kind < 2; ++kind) {
    // Rank 2's parent: 0 in the binomial tree, 1 in the chain.
    const auto make = [kind](std::uint32_t r) -> std::unique_ptr<algorithm> {
      if (kind == 0) return std::make_unique<binomial_broadcast>(at(r));
      return std::make_unique<chain_broadcast>(at(r));
    };
    const std::uint32_t parent = kind == 0 ? 0 : 1;
    instance i(make(2));
    EXPECT_EQ(i.offer(3, 0, 0, 16), violation);       // not the parent
    EXPECT_EQ(i.offer(parent, 1, 0, 16), violation);  // unknown step
    EXPECT_EQ(i.offer(parent, 0, 1, 16), violation);  // a gap: chunk 1 before chunk 0
    EXPECT_EQ(i.offer(parent, 0, 0, 15), violation);  // wrong size
    EXPECT_EQ(i.offer(parent, 0, 0, 16), std::error_code{});
    EXPECT_EQ(i.offer(parent, 0, 0, 16), violation);  // duplicate
    EXPECT_EQ(i.offer(parent, 0, 1, 16), std::error_code{});
    EXPECT_EQ(i.offer(parent, 0, 2, 16), violation);  // the last chunk is 8 bytes
    EXPECT_EQ(i.offer(parent, 0, 2, 8), std::error_code{});
    EXPECT_TRUE(i.algo->done());
    EXPECT_EQ(i.offer(parent, 0, 3, 8), violation);  // past the message
    instance root(make(0));
    EXPECT_EQ(root.offer(1, 0, 0, 16), violation);  // nobody sends to the root
  }
}

TEST(malformed_input, reduce_accepts_only_children_in_order_with_the_right_sizes) {
  instance i(std::make_unique<binomial_reduce>(at(4)));  // children 5, 6; parent 0
  EXPECT_EQ(i.offer(0, 0, 0, 16), violation);            // the parent does not send
  EXPECT_EQ(i.offer(7, 0, 0, 16), violation);            // a grandchild does not either
  EXPECT_EQ(i.offer(5, 2, 0, 16), violation);
  EXPECT_EQ(i.offer(5, 0, 0, 12), violation);
  EXPECT_EQ(i.offer(5, 0, 0, 16), std::error_code{});
  EXPECT_EQ(i.offer(5, 0, 0, 16), violation);  // duplicate
  EXPECT_EQ(i.offer(6, 0, 2, 8), violation);   // a gap
  instance root(std::make_unique<binomial_reduce>(at(0)));
  EXPECT_EQ(root.offer(3, 0, 0, 16), violation);  // rank 3 reports to 2
}

TEST(malformed_input, barrier_accepts_each_round_once_from_its_peer_and_empty) {
  instance i(std::make_unique<dissemination_barrier>(at(0)));  // hears 7, 6, 4 in rounds 0, 1, 2
  EXPECT_EQ(i.offer(6, 0, 0, 0), violation);                   // round 0 comes from 7
  EXPECT_EQ(i.offer(7, 3, 0, 0), violation);                   // only 3 rounds
  EXPECT_EQ(i.offer(7, 0, 0, 1), violation);                   // a barrier carries no bytes
  EXPECT_EQ(i.offer(7, 0, 1, 0), violation);
  EXPECT_EQ(i.offer(4, 2, 0, 0), std::error_code{});  // a round early: kept
  EXPECT_FALSE(i.algo->done());
  EXPECT_EQ(i.offer(4, 2, 0, 0), violation);  // duplicate
  EXPECT_EQ(i.offer(7, 0, 0, 0), std::error_code{});
  EXPECT_EQ(i.offer(6, 1, 0, 0), std::error_code{});
  EXPECT_TRUE(i.algo->done());
  EXPECT_EQ(i.offer(7, 0, 0, 0), violation);
}

TEST(malformed_input, alltoall_accepts_each_peer_once_in_its_round) {
  instance i(std::make_unique<pairwise_alltoall>(at(3)));  // XOR: peer q in round 3 ^ q
  EXPECT_EQ(i.offer(3, 0, 0, 16), violation);              // from ourselves
  EXPECT_EQ(i.offer(8, 11, 0, 16), violation);             // outside the world
  EXPECT_EQ(i.offer(2, 2, 0, 16), violation);              // 2 sends in round 1
  EXPECT_EQ(i.offer(2, 1, 0, 20), violation);
  EXPECT_EQ(i.offer(2, 1, 1, 16), violation);  // a gap
  EXPECT_EQ(i.offer(2, 1, 0, 16), std::error_code{});
  EXPECT_EQ(i.offer(2, 1, 0, 16), violation);          // duplicate
  EXPECT_EQ(i.offer(5, 6, 0, 16), std::error_code{});  // out of place, early is fine
}

TEST(malformed_input, alltoall_in_place_keeps_a_block_that_comes_a_round_early) {
  pairwise_alltoall a({0, 8, 0, 4, dtype::int32, reduce_op::sum, 16});
  std::vector<std::byte> buffer(16 * 8);
  std::vector<send_step> out;
  ASSERT_TRUE(a.start({buffer, buffer, {}}, out));
  const auto data = bytes(16);
  out.clear();
  auto early = a.on_receive(2, 2, 0, data, out);  // round 2; we are in round 1
  ASSERT_TRUE(early);
  EXPECT_EQ(early.value(), receive_status::not_yet);
  auto now = a.on_receive(1, 1, 0, data, out);
  ASSERT_TRUE(now);
  EXPECT_EQ(now.value(), receive_status::consumed);
  ASSERT_EQ(out.size(), 1u);  // round 2 begins: its send goes out before its receive is applied
  EXPECT_EQ(out[0].peer, 2u);
  early = a.on_receive(2, 2, 0, data, out);
  ASSERT_TRUE(early);
  EXPECT_EQ(early.value(), receive_status::consumed);
}

TEST(malformed_input, gather_and_scatter_check_peer_chunk_and_size) {
  instance g(std::make_unique<binomial_gather>(at(4)));  // children 5 (1 block), 6 (2 blocks)
  EXPECT_EQ(g.offer(0, 0, 0, 16), violation);
  EXPECT_EQ(g.offer(6, 0, 0, 15), violation);
  EXPECT_EQ(g.offer(6, 1, 0, 16), violation);
  for (std::uint32_t c = 0; c < 5; ++c) EXPECT_EQ(g.offer(6, 0, c, 16), std::error_code{});
  EXPECT_EQ(g.offer(6, 0, 5, 16), violation);             // 80 bytes are 5 chunks
  instance s(std::make_unique<binomial_scatter>(at(4)));  // from 0: blocks of 4..7, 160 bytes
  EXPECT_EQ(s.offer(5, 0, 0, 16), violation);
  EXPECT_EQ(s.offer(0, 0, 1, 16), violation);
  EXPECT_EQ(s.offer(0, 0, 0, 16), std::error_code{});
  EXPECT_EQ(s.offer(0, 0, 0, 16), violation);
  instance root(std::make_unique<binomial_scatter>(at(0)));
  EXPECT_EQ(root.offer(1, 0, 0, 16), violation);
}

TEST(malformed_input, bad_parameters_and_short_buffers_are_errors_from_start) {
  std::vector<std::byte> small(8), big(4096);
  std::vector<send_step> out;
  const auto start = [&](algorithm&& a, std::span<const std::byte> in, std::span<std::byte> o) {
    std::vector<std::byte> scratch(a.scratch_bytes());
    auto r = a.start({in, o, scratch}, out);
    return r ? std::error_code{} : r.error();
  };
  const auto invalid = make_error_code(errc::invalid_argument);
  const auto short_buffer = make_error_code(errc::size_mismatch);
  algorithm_params no_world{0, 0, 0, 10, dtype::int32, reduce_op::sum, 16};
  algorithm_params rank_past{9, 8, 0, 10, dtype::int32, reduce_op::sum, 16};
  algorithm_params root_past{1, 8, 8, 10, dtype::int32, reduce_op::sum, 16};
  for (const auto& p : {no_world, rank_past, root_past}) {
    EXPECT_EQ(start(binomial_broadcast(p), big, big), invalid);
    EXPECT_EQ(start(chain_broadcast(p), big, big), invalid);
    EXPECT_EQ(start(binomial_reduce(p), big, big), invalid);
    EXPECT_EQ(start(dissemination_barrier(p), big, big), invalid);
    EXPECT_EQ(start(pairwise_alltoall(p), big, big), invalid);
    EXPECT_EQ(start(binomial_gather(p), big, big), invalid);
    EXPECT_EQ(start(binomial_scatter(p), big, big), invalid);
  }
  EXPECT_EQ(start(binomial_broadcast(at(0)), small, big), short_buffer);
  EXPECT_EQ(start(binomial_broadcast(at(3)), big, small), short_buffer);
  EXPECT_EQ(start(binomial_reduce(at(1)), small, big), short_buffer);
  EXPECT_EQ(start(binomial_reduce(at(0)), big, small), short_buffer);
  EXPECT_EQ(start(pairwise_alltoall(at(0)), big, small), short_buffer);
  EXPECT_EQ(start(binomial_gather(at(0)), big, small), short_buffer);
  EXPECT_EQ(start(binomial_scatter(at(0)), small, big), short_buffer);
  algorithm_params bitwise_float = at(0);
  bitwise_float.type = dtype::float32;
  bitwise_float.op = reduce_op::bxor;
  EXPECT_EQ(start(binomial_reduce(bitwise_float), big, big), make_error_code(errc::unsupported_op));
  algorithm_params no_type = at(0);
  no_type.type = static_cast<dtype>(99);
  EXPECT_EQ(start(binomial_reduce(no_type), big, big), make_error_code(errc::unsupported_type));
  EXPECT_EQ(start(binomial_gather(no_type), big, big), make_error_code(errc::unsupported_type));
  // A count whose byte size does not fit in size_t.
  algorithm_params huge = at(0);
  huge.count = static_cast<std::size_t>(-1) / 2;
  EXPECT_EQ(start(binomial_broadcast(huge), big, big), invalid);
  EXPECT_EQ(start(pairwise_alltoall(huge), big, big), invalid);
}

TEST(malformed_input, chunks_before_start_wait_and_a_second_start_is_refused) {
  binomial_broadcast b(at(1));
  std::vector<send_step> out;
  const auto data = bytes(16);
  auto early = b.on_receive(0, 0, 0, data, out);
  ASSERT_TRUE(early);
  EXPECT_EQ(early.value(), receive_status::not_yet);
  std::vector<std::byte> buffer(40);
  ASSERT_TRUE(b.start({{}, buffer, {}}, out));
  EXPECT_FALSE(b.start({{}, buffer, {}}, out));
}

}  // namespace
}  // namespace vessel::collectives

namespace vessel::collectives {
namespace {

// Garbage from a peer at any point of a run: every answer is consumed, not_yet or a
// protocol_violation, never a crash (ASan/UBSan watch the memory), and once an instance has
// failed the test stops feeding it, as a driver would.
TEST(malformed_input, random_chunks_at_random_moments_never_crash) {
  using factory = std::unique_ptr<algorithm> (*)(const algorithm_params&);
  const factory makers[] = {
      [](const algorithm_params& p) -> std::unique_ptr<algorithm> {
        return std::make_unique<binomial_broadcast>(p);
      },
      [](const algorithm_params& p) -> std::unique_ptr<algorithm> {
        return std::make_unique<chain_broadcast>(p);
      },
      [](const algorithm_params& p) -> std::unique_ptr<algorithm> {
        return std::make_unique<binomial_reduce>(p);
      },
      [](const algorithm_params& p) -> std::unique_ptr<algorithm> {
        return std::make_unique<dissemination_barrier>(p);
      },
      [](const algorithm_params& p) -> std::unique_ptr<algorithm> {
        return std::make_unique<pairwise_alltoall>(p);
      },
      [](const algorithm_params& p) -> std::unique_ptr<algorithm> {
        return std::make_unique<binomial_gather>(p);
      },
      [](const algorithm_params& p) -> std::unique_ptr<algorithm> {
        return std::make_unique<binomial_scatter>(p);
      },
  };
  std::mt19937_64 random(42);
  const auto pick = [&random](std::uint64_t n) { return random() % n; };
  for (const factory make : makers) {
    for (int trial = 0; trial < 200; ++trial) {
      const auto p = static_cast<std::uint32_t>(1 + pick(9));
      const algorithm_params params{static_cast<std::uint32_t>(pick(p)),
                                    p,
                                    static_cast<std::uint32_t>(pick(p)),
                                    pick(20),
                                    dtype::float32,
                                    reduce_op::sum,
                                    4 * (1 + pick(6))};
      auto algo = make(params);
      std::vector<std::byte> input(4096), output(4096), scratch(algo->scratch_bytes());
      std::vector<send_step> out;
      ASSERT_TRUE(algo->start({input, output, scratch}, out));
      for (int offer = 0; offer < 40; ++offer) {
        // Mostly plausible values, so some get past the first checks.
        const auto peer = static_cast<std::uint32_t>(pick(p + 1));
        const auto step = static_cast<std::uint32_t>(pick(4));
        const auto chunk = static_cast<std::uint32_t>(pick(8));
        const std::vector<std::byte> data(pick(3) == 0 ? pick(100) : 4 * (1 + pick(6)));
        out.clear();
        auto answer = algo->on_receive(peer, step, chunk, data, out);
        if (!answer) {
          EXPECT_EQ(answer.error(), violation) << algo->name();
          break;
        }
        for (const send_step& s : out) {
          EXPECT_LT(s.peer, p);
          const std::size_t size = s.buffer == buffer_id::scratch ? scratch.size() : 4096;
          EXPECT_LE(s.offset + s.bytes, size) << algo->name();
        }
      }
    }
  }
}

}  // namespace
}  // namespace vessel::collectives
