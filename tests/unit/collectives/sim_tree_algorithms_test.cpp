// The tree, chain, barrier, alltoall, gather and scatter state machines on the simulated network
// (collectives/sim/network.hpp): correct results at 64 and 256 ranks under jitter and start skew,
// modelled completion times equal to their alpha-beta formulas on ideal links, and a killed rank
// named as the root cause of the ranks that wait for it.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "collectives/algorithms/binomial_broadcast.hpp"
#include "collectives/algorithms/binomial_gather.hpp"
#include "collectives/algorithms/binomial_reduce.hpp"
#include "collectives/algorithms/binomial_scatter.hpp"
#include "collectives/algorithms/chain_broadcast.hpp"
#include "collectives/algorithms/dissemination_barrier.hpp"
#include "collectives/algorithms/pairwise_alltoall.hpp"
#include "collectives/reduce.hpp"
#include "collectives/sim/network.hpp"
#include "tests/unit/collectives/loop_network.hpp"
#include "tests/unit/collectives/test_values.hpp"

namespace vessel::collectives {
namespace {

using testing::rank_buffers;
using make_fn = std::function<std::unique_ptr<algorithm>(const algorithm_params&)>;

template <class A>
make_fn make() {
  return [](const algorithm_params& p) { return std::make_unique<A>(p); };
}

/// One collective on every rank of a simulated network.
struct sim_run {
  std::vector<std::unique_ptr<algorithm>> ranks;
  std::vector<rank_buffers> buffers;
  sim::run_report report;
};

void run(sim::network& net, sim_run& s) {
  std::vector<algorithm*> algos;
  std::vector<algorithm_buffers> spans;
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    rank_buffers& b = s.buffers[r];
    b.scratch.resize(s.ranks[r]->scratch_bytes());
    algorithm_buffers span{b.input, b.output, b.scratch};
    if (b.input_in_output) span.input = std::span(b.output).subspan(*b.input_in_output);
    algos.push_back(s.ranks[r].get());
    spans.push_back(span);
  }
  s.report = net.run(algos, spans);
}

sim_run prepare(const make_fn& make, algorithm_params params) {
  sim_run s;
  for (std::uint32_t r = 0; r < params.size; ++r) {
    params.rank = r;
    s.ranks.push_back(make(params));
  }
  s.buffers.resize(params.size);
  return s;
}

sim::network_config noisy(std::uint32_t ranks, std::uint64_t seed) {
  sim::network_config config;
  config.ranks = ranks;
  config.seed = seed;
  config.jitter_s = 20e-6;
  config.start_skew_s = 50e-6;
  return config;
}

class on_simulated_network : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(on_simulated_network, broadcasts_reduce_and_barrier_give_the_serial_results) {
  const std::uint32_t p = GetParam();
  const std::uint32_t root = 37 % p;
  std::mt19937_64 random(p);
  sim::network net(noisy(p, 3));
  const std::size_t count = 300;  // 1200 bytes in 256-byte chunks
  const algorithm_params base{0, p, root, count, dtype::int32, reduce_op::sum, 256};

  const auto message = testing::random_bytes(count * 4, random);
  for (const make_fn& m : {make<binomial_broadcast>(), make<chain_broadcast>()}) {
    sim_run s = prepare(m, base);
    for (auto& b : s.buffers) b.output.assign(message.size(), std::byte{0});
    s.buffers[root].input = message;
    run(net, s);
    ASSERT_TRUE(s.report.completed()) << s.report.explain();
    for (std::uint32_t r = 0; r < p; ++r) ASSERT_EQ(s.buffers[r].output, message) << r;
  }

  for (reduce_op op : {reduce_op::sum, reduce_op::avg, reduce_op::max}) {
    algorithm_params params = base;
    params.type = dtype::float32;
    params.op = op;
    sim_run s = prepare(make<binomial_reduce>(), params);
    std::vector<std::byte> want;
    for (std::uint32_t r = 0; r < p; ++r) {
      s.buffers[r].input = testing::exact_values(dtype::float32, op, count, random);
      if (r == 0) {
        want = s.buffers[r].input;
      } else {
        ASSERT_TRUE(reduce_into(want, s.buffers[r].input, dtype::float32, op));
      }
    }
    if (op == reduce_op::avg) {
      ASSERT_TRUE(finish_average(want, dtype::float32, p));
    }
    s.buffers[root].output.resize(want.size());
    run(net, s);
    ASSERT_TRUE(s.report.completed()) << s.report.explain();
    EXPECT_EQ(s.buffers[root].output, want) << to_string(op);
  }

  sim_run barrier = prepare(make<dissemination_barrier>(), base);
  run(net, barrier);
  ASSERT_TRUE(barrier.report.completed()) << barrier.report.explain();
}

TEST_P(on_simulated_network, alltoall_gather_and_scatter_give_the_serial_results) {
  const std::uint32_t p = GetParam();
  const std::uint32_t root = 37 % p;
  std::mt19937_64 random(p + 1);
  sim::network net(noisy(p, 5));
  const std::size_t count = p >= 256 ? 2 : 3;  // 8- or 12-byte blocks in 8-byte chunks
  const std::size_t block = count * 4;
  const algorithm_params base{0, p, root, count, dtype::int32, reduce_op::sum, 8};

  sim_run a = prepare(make<pairwise_alltoall>(), base);
  for (auto& b : a.buffers) {
    b.input = testing::random_bytes(block * p, random);
    b.output.resize(block * p);
  }
  run(net, a);
  ASSERT_TRUE(a.report.completed()) << a.report.explain();
  for (std::uint32_t r = 0; r < p; ++r) {
    for (std::uint32_t j = 0; j < p; ++j) {
      ASSERT_TRUE(std::equal(a.buffers[r].output.begin() + j * block,
                             a.buffers[r].output.begin() + (j + 1) * block,
                             a.buffers[j].input.begin() + r * block));
    }
  }

  sim_run g = prepare(make<binomial_gather>(), base);
  std::vector<std::byte> gathered;
  for (auto& b : g.buffers) {
    b.input = testing::random_bytes(block, random);
    gathered.insert(gathered.end(), b.input.begin(), b.input.end());
  }
  g.buffers[root].output.resize(block * p);
  run(net, g);
  ASSERT_TRUE(g.report.completed()) << g.report.explain();
  EXPECT_EQ(g.buffers[root].output, gathered);

  sim_run s = prepare(make<binomial_scatter>(), base);
  for (auto& b : s.buffers) b.output.resize(block);
  s.buffers[root].input = gathered;
  run(net, s);
  ASSERT_TRUE(s.report.completed()) << s.report.explain();
  for (std::uint32_t r = 0; r < p; ++r) {
    EXPECT_TRUE(std::equal(s.buffers[r].output.begin(), s.buffers[r].output.end(),
                           gathered.begin() + r * block))
        << r;
  }
}

INSTANTIATE_TEST_SUITE_P(ranks, on_simulated_network, ::testing::Values(64u, 256u));

// Ideal links (no jitter, no skew): the modelled time is the algorithm's alpha-beta cost, to
// rounding. A link carries one message at a time; a rank may use several links at once.
constexpr double alpha = 10e-6;
constexpr double beta = 1e-9;

double modelled(const make_fn& make, const algorithm_params& params, std::size_t input_bytes,
                std::size_t output_bytes) {
  sim::network_config config;
  config.ranks = params.size;
  config.link = {alpha, beta};
  sim::network net(config);
  sim_run s = prepare(make, params);
  for (auto& b : s.buffers) {
    b.input.resize(input_bytes);
    b.output.resize(output_bytes);
  }
  run(net, s);
  EXPECT_TRUE(s.report.completed()) << s.report.explain();
  return s.report.completion_s;
}

std::uint32_t floor_log2(std::uint32_t p) {
  return 31 - static_cast<std::uint32_t>(__builtin_clz(p));
}
std::uint32_t ceil_log2(std::uint32_t p) {
  return p == 1 ? 0 : floor_log2(p - 1) + 1;
}

TEST(alpha_beta_cost, tree_algorithms_take_their_depth_in_hops) {
  // Binomial depth is the most set bits of any relative rank below p: floor(log2 p).
  const std::size_t n = 4096;
  for (std::uint32_t p : {2u, 5u, 12u, 64u, 256u}) {
    SCOPED_TRACE(p);
    const algorithm_params one_chunk{0, p, p / 3, n / 4, dtype::float32, reduce_op::sum, n};
    const double hop = alpha + static_cast<double>(n) * beta;
    EXPECT_NEAR(modelled(make<binomial_broadcast>(), one_chunk, n, n), floor_log2(p) * hop, 1e-12);
    EXPECT_NEAR(modelled(make<binomial_reduce>(), one_chunk, n, n), floor_log2(p) * hop, 1e-12);
    EXPECT_NEAR(modelled(make<dissemination_barrier>(), one_chunk, 0, 0), ceil_log2(p) * alpha,
                1e-12);
  }
}

TEST(alpha_beta_cost, chain_broadcast_pipelines_chunks_so_latency_overlaps) {
  // Chunk j reaches rank m at m * alpha + (m + j) * c * beta: (p - 1) alphas, (p + k - 2) chunks.
  // From rendezvous_bytes one alpha more: every child's "ready" travels at once, before any chunk.
  const std::size_t c = 4096;
  for (std::uint32_t p : {2u, 7u, 64u}) {
    for (std::size_t k : {1u, 16u}) {
      const algorithm_params params{0, p, 1 % p, k * c / 4, dtype::float32, reduce_op::sum, c};
      const double handshake = k * c >= tree_broadcast::rendezvous_bytes ? alpha : 0.0;
      const double want =
          handshake + (p - 1) * alpha + static_cast<double>(p + k - 2) * c * beta;
      EXPECT_NEAR(modelled(make<chain_broadcast>(), params, k * c, k * c), want, 1e-12)
          << "p=" << p << " k=" << k;
    }
  }
}

TEST(alpha_beta_cost, pairwise_alltoall_takes_p_minus_1_exchanges) {
  const std::size_t n = 2048;  // one block
  for (std::uint32_t p : {2u, 6u, 8u, 13u}) {
    const algorithm_params params{0, p, 0, n / 4, dtype::float32, reduce_op::sum, n};
    const double want = (p - 1) * (alpha + static_cast<double>(n) * beta);
    EXPECT_NEAR(modelled(make<pairwise_alltoall>(), params, n * p, n * p), want, 1e-12) << p;
  }
}

TEST(alpha_beta_cost, gather_and_scatter_move_p_minus_1_blocks_over_log2_p_hops) {
  // Power-of-two worlds: T(p) = T(p/2) + alpha + (p/2) n beta = log2(p) alpha + (p - 1) n beta.
  const std::size_t n = 1024;
  for (std::uint32_t p : {2u, 8u, 64u}) {
    const algorithm_params params{0, p, p - 1, n / 4, dtype::float32, reduce_op::sum, n * p};
    const double want = floor_log2(p) * alpha + static_cast<double>(p - 1) * n * beta;
    EXPECT_NEAR(modelled(make<binomial_gather>(), params, n, n * p), want, 1e-12) << p;
    EXPECT_NEAR(modelled(make<binomial_scatter>(), params, n * p, n), want, 1e-12) << p;
  }
}

TEST(simulated_faults, a_killed_rank_is_named_as_the_cause_of_a_stalled_reduce) {
  const std::uint32_t p = 16;
  sim::network net(noisy(p, 9));
  net.kill_rank(6, 0);  // relative to root 2: vrank 4, the parent of 5..7 (absolute 7..9)
  const algorithm_params params{0, p, 2, 64, dtype::int32, reduce_op::sum, 64};
  sim_run s = prepare(make<binomial_reduce>(), params);
  for (auto& b : s.buffers) {
    b.input.resize(256);
    b.output.resize(256);
  }
  run(net, s);
  EXPECT_EQ(s.report.status, sim::run_report::outcome::blocked);
  EXPECT_EQ(s.report.root_causes(), std::vector<std::uint32_t>{6});
  const sim::rank_report& root = s.report.ranks[2];
  EXPECT_FALSE(root.done);
  EXPECT_NE(std::find(root.waits_for.begin(), root.waits_for.end(), 6u), root.waits_for.end());
  EXPECT_TRUE(s.report.ranks[7].done);  // a leaf below the dead rank sent and finished
}

}  // namespace
}  // namespace vessel::collectives
