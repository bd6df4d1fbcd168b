// Binomial tree shape, chunk layout, tree and chain broadcast, binomial reduce: every rank's
// result against a serial reference, over world sizes 1..17, 64 and 256, several roots, chunk
// boundaries that do not divide the message, and seeded interleavings of deliveries.

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <memory>
#include <random>

#include "collectives/algorithms/binomial_broadcast.hpp"
#include "collectives/algorithms/binomial_reduce.hpp"
#include "collectives/algorithms/binomial_tree.hpp"
#include "collectives/algorithms/chain_broadcast.hpp"
#include "collectives/algorithms/chunk_layout.hpp"
#include "collectives/reduce.hpp"
#include "tests/unit/collectives/loop_network.hpp"
#include "tests/unit/collectives/test_values.hpp"

namespace vessel::collectives {
namespace {

using testing::exact_values;
using testing::loop_network;
using testing::random_bytes;
using testing::rank_buffers;
using testing::roots_for;
using testing::world_sizes;

TEST(binomial_tree, every_rank_is_the_child_of_its_parent_and_subtrees_partition_the_world) {
  for (std::uint32_t p : world_sizes()) {
    for (std::uint32_t root : roots_for(p)) {
      std::uint32_t children_total = 0;
      for (std::uint32_t r = 0; r < p; ++r) {
        const binomial_tree tree(r, p, root);
        EXPECT_EQ(tree.is_root(), r == root);
        std::uint32_t below = 1;
        for (const tree_child& child : tree.children()) {
          const binomial_tree sub(child.rank, p, root);
          EXPECT_EQ(sub.parent(), r) << "p=" << p << " root=" << root;
          EXPECT_EQ(sub.subtree(), child.subtree);
          EXPECT_EQ(sub.vrank(), child.vrank);
          EXPECT_EQ(tree.child_index(child.rank).has_value(), true);
          below += child.subtree;
        }
        EXPECT_EQ(below, tree.subtree()) << "p=" << p << " rank=" << r;
        children_total += static_cast<std::uint32_t>(tree.children().size());
      }
      EXPECT_EQ(children_total, p - 1);
      EXPECT_EQ(binomial_tree(root, p, root).subtree(), p);
    }
  }
}

TEST(chunk_layout, chunks_cover_the_message_once_and_never_straddle_the_split) {
  for (std::size_t total : {0u, 1u, 7u, 8u, 9u, 100u}) {
    for (std::size_t chunk : {1u, 3u, 8u, 1000u}) {
      for (std::size_t split : {0u, 1u, 4u, 7u, 50u, 100u}) {
        const chunk_layout layout(total, chunk, split);
        std::size_t next = 0;
        for (std::size_t i = 0; i < layout.count(); ++i) {
          const byte_range r = layout.at(i);
          EXPECT_EQ(r.offset, next);
          EXPECT_GT(r.bytes, 0u);
          EXPECT_LE(r.bytes, chunk);
          if (split > 0 && split < total) {
            EXPECT_FALSE(r.offset < split && r.offset + r.bytes > split);
          }
          next = r.offset + r.bytes;
        }
        EXPECT_EQ(next, total);
      }
    }
  }
  EXPECT_EQ(chunk_granule(10, 4), 8u);
  EXPECT_EQ(chunk_granule(0, 8), 8u);
}

enum class broadcast_kind { binomial, chain };

std::unique_ptr<algorithm> make_broadcast(broadcast_kind kind, const algorithm_params& p) {
  if (kind == broadcast_kind::chain) return std::make_unique<chain_broadcast>(p);
  return std::make_unique<binomial_broadcast>(p);
}

struct broadcast_case {
  std::uint32_t size;
  std::uint32_t root;
  std::size_t count;
  std::size_t chunk_bytes;
  dtype type = dtype::int32;
  bool in_place = false;
};

void check_broadcast(broadcast_kind kind, const broadcast_case& c, std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "p=" << c.size << " root=" << c.root << " count=" << c.count
               << " chunk=" << c.chunk_bytes << " type=" << to_string(c.type) << " seed=" << seed);
  std::mt19937_64 random(seed);
  const std::size_t bytes = c.count * size_of(c.type);
  const std::vector<std::byte> message = random_bytes(bytes, random);
  std::vector<std::unique_ptr<algorithm>> ranks;
  std::vector<rank_buffers> buffers(c.size);
  for (std::uint32_t r = 0; r < c.size; ++r) {
    algorithm_params params{r, c.size, c.root, c.count, c.type, reduce_op::sum, c.chunk_bytes};
    ranks.push_back(make_broadcast(kind, params));
    buffers[r].output.assign(bytes, std::byte{0xCD});
    if (r == c.root) {
      if (c.in_place) {
        buffers[r].output = message;
        buffers[r].input_in_output = 0;
      } else {
        buffers[r].input = message;
      }
    }
  }
  loop_network net(std::move(ranks), std::move(buffers), seed);
  ASSERT_FALSE(net.run());
  ASSERT_TRUE(net.quiet());
  ASSERT_TRUE(net.all_done());
  for (std::uint32_t r = 0; r < c.size; ++r) {
    EXPECT_EQ(net.buffers(r).output, message) << "rank " << r;
  }
  const std::size_t chunks = bytes == 0 ? 0 : (bytes + c.chunk_bytes - 1) / c.chunk_bytes;
  EXPECT_EQ(net.delivered(), chunks * (c.size - 1));  // every rank receives each chunk once
}

class broadcast_test : public ::testing::TestWithParam<broadcast_kind> {};

TEST_P(broadcast_test, every_rank_gets_the_root_message_for_every_world_size_and_root) {
  std::uint64_t seed = 1;
  for (std::uint32_t p : world_sizes()) {
    for (std::uint32_t root : roots_for(p)) {
      // 37 int32 in 8-byte chunks: 19 chunks, the last one short.
      for (std::size_t count : {0u, 1u, 37u}) {
        check_broadcast(GetParam(), {p, root, count, 8}, ++seed);
      }
    }
  }
}

TEST_P(broadcast_test, in_place_at_the_root_and_every_dtype) {
  std::uint64_t seed = 100;
  for (dtype t : {dtype::int8, dtype::uint8, dtype::int32, dtype::uint32, dtype::int64,
                  dtype::uint64, dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64}) {
    // A chunk request of 12 bytes rounds down to whole elements (8 for 8-byte types).
    const std::size_t chunk = chunk_granule(12, size_of(t));
    check_broadcast(GetParam(), {7, 3, 11, chunk, t, true}, ++seed);
    check_broadcast(GetParam(), {6, 5, 11, chunk, t, false}, ++seed);
  }
}

TEST_P(broadcast_test, random_interleavings_give_the_same_result) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    check_broadcast(GetParam(), {13, 4, 50, 12, dtype::int32}, seed);
  }
}

INSTANTIATE_TEST_SUITE_P(kinds, broadcast_test,
                         ::testing::Values(broadcast_kind::binomial, broadcast_kind::chain),
                         [](const auto& test) {
                           return test.param == broadcast_kind::chain ? "chain" : "binomial";
                         });

TEST(chain_broadcast, each_link_carries_the_message_once_along_the_chain) {
  for (std::uint32_t r = 0; r < 5; ++r) {
    chain_broadcast chain({r, 5, 2, 10, dtype::int32, reduce_op::sum, 8});
    std::vector<std::byte> in(40), output(40);
    std::vector<send_step> out;
    ASSERT_TRUE(chain.start({in, output, {}}, out));
    if (r == 2) {
      ASSERT_EQ(out.size(), 5u);  // 40 bytes in 8-byte chunks, all to the next rank
      for (const send_step& s : out) EXPECT_EQ(s.peer, 3u);
    } else {
      EXPECT_TRUE(out.empty());
    }
  }
}

struct reduce_case {
  std::uint32_t size;
  std::uint32_t root;
  std::size_t count;
  std::size_t chunk_bytes;
  dtype type;
  reduce_op op;
  bool in_place = false;
};

/// Runs a binomial reduce; returns the root's output (empty on failure).
std::vector<std::byte> run_reduce(const reduce_case& c,
                                  const std::vector<std::vector<std::byte>>& inputs,
                                  std::uint64_t seed, std::size_t* refusals = nullptr) {
  std::vector<std::unique_ptr<algorithm>> ranks;
  std::vector<rank_buffers> buffers(c.size);
  for (std::uint32_t r = 0; r < c.size; ++r) {
    ranks.push_back(std::make_unique<binomial_reduce>(
        algorithm_params{r, c.size, c.root, c.count, c.type, c.op, c.chunk_bytes}));
    if (r == c.root && c.in_place) {
      buffers[r].output = inputs[r];
      buffers[r].input_in_output = 0;
    } else {
      buffers[r].input = inputs[r];
      // Non-roots pass no output at all: the algorithm must not touch it.
      if (r == c.root) buffers[r].output.assign(inputs[r].size(), std::byte{0xCD});
    }
  }
  loop_network net(std::move(ranks), std::move(buffers), seed);
  const auto e = net.run();
  EXPECT_FALSE(e) << e.message();
  EXPECT_TRUE(net.quiet());
  EXPECT_TRUE(net.all_done());
  if (e || !net.all_done()) return {};
  const std::size_t chunks =
      inputs[0].empty() ? 0 : (inputs[0].size() + c.chunk_bytes - 1) / c.chunk_bytes;
  EXPECT_EQ(net.delivered(), chunks * (c.size - 1));
  if (refusals != nullptr) *refusals += net.refusals();
  return net.buffers(c.root).output;
}

std::vector<std::byte> serial_reduce(const reduce_case& c,
                                     const std::vector<std::vector<std::byte>>& inputs) {
  std::vector<std::byte> acc = inputs[0];
  for (std::uint32_t r = 1; r < c.size; ++r) {
    EXPECT_TRUE(reduce_into(acc, inputs[r], c.type, c.op));
  }
  if (c.op == reduce_op::avg) {
    EXPECT_TRUE(finish_average(acc, c.type, c.size));
  }
  return acc;
}

void check_reduce(const reduce_case& c, std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "p=" << c.size << " root=" << c.root << " count=" << c.count
               << " chunk=" << c.chunk_bytes << " type=" << to_string(c.type)
               << " op=" << to_string(c.op) << " in_place=" << c.in_place << " seed=" << seed);
  std::mt19937_64 random(seed);
  std::vector<std::vector<std::byte>> inputs;
  for (std::uint32_t r = 0; r < c.size; ++r) {
    inputs.push_back(exact_values(c.type, c.op, c.count, random));
  }
  EXPECT_EQ(run_reduce(c, inputs, seed), serial_reduce(c, inputs));
}

constexpr dtype all_dtypes[] = {dtype::int8,    dtype::uint8,  dtype::int32,   dtype::uint32,
                                dtype::int64,   dtype::uint64, dtype::float16, dtype::bfloat16,
                                dtype::float32, dtype::float64};
constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::prod, reduce_op::min, reduce_op::max,
                                 reduce_op::avg, reduce_op::band, reduce_op::bor, reduce_op::bxor};

TEST(binomial_reduce, matches_a_serial_reduction_for_every_world_size_and_root) {
  std::uint64_t seed = 1;
  for (std::uint32_t p : world_sizes()) {
    for (std::uint32_t root : roots_for(p)) {
      for (std::size_t count : {0u, 1u, 23u}) {
        check_reduce({p, root, count, 8, dtype::int32, reduce_op::sum}, ++seed);
      }
      check_reduce({p, root, 23, 8, dtype::float32, reduce_op::avg}, ++seed);
    }
  }
}

TEST(binomial_reduce, every_dtype_and_operator_including_avg_and_in_place) {
  std::uint64_t seed = 1000;
  for (dtype t : all_dtypes) {
    for (reduce_op op : all_ops) {
      if (!supports(t, op)) continue;
      const std::size_t chunk = chunk_granule(20, size_of(t));
      for (std::uint32_t p : {1u, 3u, 8u, 17u}) {
        check_reduce({p, p / 2, 13, chunk, t, op}, ++seed);
      }
      check_reduce({6, 5, 13, chunk, t, op, true}, ++seed);
    }
  }
}

TEST(binomial_reduce, float_results_are_bitwise_identical_under_any_interleaving) {
  // Random floats make the reduction order visible in the result bits: the algorithm must fix it.
  for (dtype t : {dtype::float32, dtype::bfloat16, dtype::float64}) {
    const reduce_case c{13, 4, 40, chunk_granule(24, size_of(t)), t, reduce_op::sum};
    std::mt19937_64 random(7);
    std::vector<std::vector<std::byte>> inputs;
    for (std::uint32_t r = 0; r < c.size; ++r) {
      std::vector<std::byte> in(c.count * size_of(t));
      for (std::size_t i = 0; i < c.count; ++i) {
        const double v = std::uniform_real_distribution<double>(-1, 1)(random);
        if (t == dtype::float64) {
          std::memcpy(in.data() + i * 8, &v, 8);
        } else {
          const float f = static_cast<float>(v);
          if (t == dtype::float32) {
            std::memcpy(in.data() + i * 4, &f, 4);
          } else {
            const auto top = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(f) >> 16);
            std::memcpy(in.data() + i * 2, &top, 2);
          }
        }
      }
      inputs.push_back(std::move(in));
    }
    std::size_t out_of_order = 0;
    const std::vector<std::byte> first = run_reduce(c, inputs, 1, &out_of_order);
    ASSERT_FALSE(first.empty());
    for (std::uint64_t seed = 2; seed <= 20; ++seed) {
      EXPECT_EQ(run_reduce(c, inputs, seed, &out_of_order), first)
          << to_string(t) << " seed " << seed;
    }
    // The interleavings did bring children's chunks out of the fixed order.
    EXPECT_GT(out_of_order, 0u);
  }
}

TEST(binomial_reduce, leaves_need_no_scratch_and_inner_ranks_one_message) {
  const algorithm_params leaf{1, 8, 0, 100, dtype::float32, reduce_op::sum, 64};
  const algorithm_params inner{4, 8, 0, 100, dtype::float32, reduce_op::sum, 64};
  const algorithm_params root{0, 8, 0, 100, dtype::float32, reduce_op::sum, 64};
  EXPECT_EQ(binomial_reduce(leaf).scratch_bytes(), 0u);
  EXPECT_EQ(binomial_reduce(inner).scratch_bytes(), 400u);
  EXPECT_EQ(binomial_reduce(root).scratch_bytes(), 0u);
}

}  // namespace
}  // namespace vessel::collectives
