#include "collectives/selection.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "collectives/errc.hpp"

namespace vessel::collectives {
namespace {

env_lookup env_of(std::map<std::string, std::string, std::less<>> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    if (auto it = vars.find(name); it != vars.end()) return it->second;
    return std::nullopt;
  };
}

std::string_view pick(const algorithm_selector& s, collective_op op, std::uint32_t world,
                      std::size_t bytes, std::string_view per_call = {}) {
  auto r = s.select(op, world, bytes, per_call);
  EXPECT_TRUE(r) << r.error().message();
  return r ? r.value() : std::string_view{};
}

std::string_view cheapest_by_model(collective_op op, std::uint32_t world, std::size_t bytes) {
  std::string_view best;
  double best_cost = 0;
  for (std::string_view name : algorithm_names(op)) {
    const double cost = *modelled_seconds(op, name, world, bytes, loopback_tcp_model);
    if (best.empty() || cost < best_cost) {
      best = name;
      best_cost = cost;
    }
  }
  return best;
}

TEST(CollectivesSelection, ModelTableFollowsTheModelForExactWorldSizes) {
  const algorithm_selector selector = algorithm_selector::model_only();
  for (collective_op op : all_collective_ops) {
    for (std::uint32_t world : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 13u, 16u, 64u, 128u, 256u}) {
      for (std::size_t bytes = 1; bytes <= (std::size_t{1} << 30); bytes = bytes * 3 + 1) {
        EXPECT_EQ(pick(selector, op, world, bytes), cheapest_by_model(op, world, bytes))
            << to_string(op) << " world " << world << " bytes " << bytes;
      }
    }
  }
}

TEST(CollectivesSelection, TwoRankAllreduceCrossoverIsTwoAlphaOverGamma) {
  // p = 2: recursive doubling sends n bytes once and reduces n; ring/Rabenseifner send n/2 twice
  // and reduce n/2. Equal when alpha = n * gamma / 2.
  const algorithm_selector selector = algorithm_selector::model_only();
  const auto rules = selector.rules(collective_op::allreduce);
  const selection_rule* two = nullptr;
  for (const auto& rule : rules) {
    if (rule.min_world == 2) {
      two = &rule;
      break;
    }
  }
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->algorithm, "recursive_doubling");
  const double crossover = 2 * loopback_tcp_model.alpha_s / loopback_tcp_model.gamma_s_per_byte;
  EXPECT_NEAR(static_cast<double>(two->max_bytes), crossover, crossover * 0.01);
  EXPECT_EQ(pick(selector, collective_op::allreduce, 2, 8), "recursive_doubling");
  EXPECT_EQ(pick(selector, collective_op::allreduce, 2, std::size_t{64} << 20), "ring");
}

TEST(CollectivesSelection, LargeAllreduceUsesRabenseifnerOnPowersOfTwoAndRingOtherwise) {
  const algorithm_selector selector = algorithm_selector::model_only();
  const std::size_t large = std::size_t{64} << 20;
  // Same bytes on the wire as the ring, 2 log2(p) instead of 2 (p - 1) latencies.
  EXPECT_EQ(pick(selector, collective_op::allreduce, 4, large), "rabenseifner");
  EXPECT_EQ(pick(selector, collective_op::allreduce, 8, large), "rabenseifner");
  // Folding 6 onto 4 ranks costs a whole extra vector each way: the ring needs no fold.
  EXPECT_EQ(pick(selector, collective_op::allreduce, 6, large), "ring");
  EXPECT_EQ(pick(selector, collective_op::allreduce, 8, 8), "recursive_doubling");
  EXPECT_EQ(pick(selector, collective_op::broadcast, 2, large), "binomial");
  EXPECT_EQ(pick(selector, collective_op::broadcast, 16, large), "chain");
  EXPECT_EQ(pick(selector, collective_op::broadcast, 16, 8), "binomial");
}

TEST(CollectivesSelection, EveryRuleNamesAKnownAlgorithmAndEveryWorldIsCovered) {
  const algorithm_selector selector;
  for (collective_op op : all_collective_ops) {
    ASSERT_FALSE(algorithm_names(op).empty());
    for (const auto& rule : selector.rules(op)) {
      EXPECT_EQ(rule.op, op);
      EXPECT_LE(rule.min_world, rule.max_world);
      EXPECT_TRUE(modelled_seconds(op, rule.algorithm, 2, 0, loopback_tcp_model))
          << rule.algorithm;
    }
    for (std::uint32_t world : {1u, 65u, 100u, 1000u, 70000u, UINT32_MAX}) {
      EXPECT_TRUE(selector.select(op, world, 0)) << to_string(op) << " " << world;
      EXPECT_TRUE(selector.select(op, world, SIZE_MAX)) << to_string(op) << " " << world;
    }
  }
}

TEST(CollectivesSelection, PerCallNameWinsOverEnvAndTable) {
  algorithm_selector selector;
  ASSERT_TRUE(selector.apply_env(env_of({{"VESSEL_ALGO_ALLREDUCE", "ring"}})));
  EXPECT_EQ(pick(selector, collective_op::allreduce, 2, 8), "ring");
  EXPECT_EQ(pick(selector, collective_op::allreduce, 2, 8, "rabenseifner"), "rabenseifner");
  EXPECT_EQ(pick(selector, collective_op::allreduce, 2, 8, "auto"), "ring");
  // The answer is the table's own string, valid after the caller's is gone.
  std::string name = "recursive_doubling";
  const auto chosen = pick(selector, collective_op::allreduce, 2, 8, name);
  name.assign(name.size(), 'x');
  EXPECT_EQ(chosen, "recursive_doubling");

  const auto unknown = selector.select(collective_op::allreduce, 2, 8, "chain");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error(), errc::unknown_algorithm);
}

TEST(CollectivesSelection, EnvOverridesPerOperationAndAutoMeansTable) {
  algorithm_selector selector;
  ASSERT_TRUE(selector.apply_env(env_of({{"VESSEL_ALGO_BROADCAST", "chain"},
                                         {"VESSEL_ALGO_REDUCE_SCATTER", "ring"},
                                         {"VESSEL_ALGO_ALLGATHER", "auto"}})));
  EXPECT_EQ(pick(selector, collective_op::broadcast, 2, 8), "chain");
  EXPECT_EQ(pick(selector, collective_op::allreduce, 2, 8), "recursive_doubling");
  ASSERT_TRUE(selector.apply_env(env_of({{"VESSEL_ALGO_BROADCAST", "auto"}})));
  EXPECT_EQ(pick(selector, collective_op::broadcast, 16, 8), "binomial");
  EXPECT_EQ(algorithm_selector::env_name(collective_op::reduce_scatter),
            "VESSEL_ALGO_REDUCE_SCATTER");
}

TEST(CollectivesSelection, UnknownEnvNameIsAnErrorAndChangesNothing) {
  algorithm_selector selector;
  const auto r = selector.apply_env(
      env_of({{"VESSEL_ALGO_ALLREDUCE", "ring"}, {"VESSEL_ALGO_BROADCAST", "rabenseifner"}}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::unknown_algorithm);
  EXPECT_EQ(pick(selector, collective_op::allreduce, 2, 8), "recursive_doubling");
  const auto empty = selector.apply_env(env_of({{"VESSEL_ALGO_BARRIER", ""}}));
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error(), errc::unknown_algorithm);
}

TEST(CollectivesSelection, ForceAndUnforce) {
  algorithm_selector selector;
  ASSERT_TRUE(selector.force(collective_op::allgather, "ring"));
  EXPECT_EQ(pick(selector, collective_op::allgather, 4, 8), "ring");
  ASSERT_TRUE(selector.force(collective_op::allgather, ""));
  EXPECT_EQ(pick(selector, collective_op::allgather, 8, 8), "recursive_doubling");
  EXPECT_EQ(selector.force(collective_op::allgather, "pairwise").error(),
            errc::unknown_algorithm);
}

TEST(CollectivesSelection, MeasuredTableComesBeforeTheModel) {
  auto selector = algorithm_selector::from_table(
      {{collective_op::allreduce, 2, 4, std::size_t{1} << 20, "rabenseifner"}});
  ASSERT_TRUE(selector) << selector.error().message();
  EXPECT_EQ(pick(selector.value(), collective_op::allreduce, 2, 8), "rabenseifner");
  EXPECT_EQ(pick(selector.value(), collective_op::allreduce, 4, std::size_t{1} << 20), "rabenseifner");
  EXPECT_EQ(pick(selector.value(), collective_op::allreduce, 2, (std::size_t{1} << 20) + 1), "ring");
  EXPECT_EQ(pick(selector.value(), collective_op::allreduce, 5, 8), "recursive_doubling");
  EXPECT_EQ(selector.value().rules(collective_op::allreduce).front().algorithm, "rabenseifner");

  auto unknown = algorithm_selector::from_table({{collective_op::alltoall, 1, 8, 64, "ring"}});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error(), errc::unknown_algorithm);
  auto inverted = algorithm_selector::from_table({{collective_op::barrier, 9, 8, 0,
                                                   "dissemination"}});
  ASSERT_FALSE(inverted);
  EXPECT_EQ(inverted.error(), errc::invalid_argument);
}

TEST(CollectivesSelection, DefaultTableUsesTheMeasuredThresholdsOnTwoAndFourRanks) {
  const algorithm_selector selector;
  const std::size_t kib = 1024;
  EXPECT_EQ(pick(selector, collective_op::allreduce, 2, 32 * kib), "recursive_doubling");
  EXPECT_EQ(pick(selector, collective_op::allreduce, 2, 32 * kib + 1), "ring");
  EXPECT_EQ(pick(selector, collective_op::allreduce, 4, 32 * kib), "recursive_doubling");
  EXPECT_EQ(pick(selector, collective_op::allreduce, 4, 32 * kib + 1), "ring");
  EXPECT_EQ(pick(selector, collective_op::broadcast, 2, 8), "chain");
  EXPECT_EQ(pick(selector, collective_op::broadcast, 4, 16 * 1024 * kib), "binomial");
  EXPECT_EQ(pick(selector, collective_op::broadcast, 4, 16 * 1024 * kib + 1), "chain");
  EXPECT_EQ(pick(selector, collective_op::allgather, 4, 8), "ring");
  // Worlds that were not measured still follow the model.
  const algorithm_selector model = algorithm_selector::model_only();
  for (std::size_t bytes : {std::size_t{8}, 64 * kib, std::size_t{64} << 20}) {
    EXPECT_EQ(pick(selector, collective_op::allreduce, 3, bytes),
              pick(model, collective_op::allreduce, 3, bytes));
    EXPECT_EQ(pick(selector, collective_op::allreduce, 8, bytes),
              pick(model, collective_op::allreduce, 8, bytes));
  }
  // Every measured rule names an algorithm its operation knows.
  for (const selection_rule& rule : measured_rules()) {
    EXPECT_TRUE(modelled_seconds(rule.op, rule.algorithm, 2, 0, loopback_tcp_model))
        << rule.algorithm;
  }
}

// The measured table is the same over every link since 2026-12-06 (two ranks over shared memory
// ran whole halves from 384 KiB to 1 MiB before): the ring from 32 KiB on two and four ranks.
TEST(CollectivesSelection, SharedMemoryOnlyRulesHoldOnlyWhereEveryLinkIsSharedMemory) {
  const algorithm_selector selector;
  const std::size_t kib = 1024, mib = 1024 * kib;
  auto over = [&](link_class links, std::uint32_t world, std::size_t bytes) {
    auto name = selector.select(collective_op::allreduce, world, bytes, {}, links);
    return name ? std::string{name.value()} : name.error().message();
  };
  const auto shm = link_class::shared_memory;
  for (link_class links : {shm, link_class::mixed}) {
    EXPECT_EQ(over(links, 2, 32 * kib), "recursive_doubling");
    EXPECT_EQ(over(links, 2, 32 * kib + 1), "ring");
    EXPECT_EQ(over(links, 2, 512 * kib), "ring");
    EXPECT_EQ(over(links, 2, mib), "ring");
    EXPECT_EQ(over(links, 4, mib), "ring");
  }
  // A caller's table may be for shared memory only, too; a forced name wins over either.
  auto own = algorithm_selector::from_table(
      {{collective_op::broadcast, 2, 2, SIZE_MAX, "binomial", /*shared_memory_only=*/true}});
  ASSERT_TRUE(own) << own.error().message();
  EXPECT_EQ(own.value().select(collective_op::broadcast, 2, mib, {}, shm).value(), "binomial");
  EXPECT_EQ(own.value().select(collective_op::broadcast, 2, mib, {}, link_class::mixed).value(),
            "chain");
  EXPECT_EQ(selector.select(collective_op::allreduce, 2, mib, "ring", shm).value(), "ring");
}

TEST(CollectivesSelection, InvalidWorldAndModelEdges) {
  const algorithm_selector selector;
  const auto zero = selector.select(collective_op::allreduce, 0, 8);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error(), errc::invalid_argument);
  EXPECT_EQ(modelled_seconds(collective_op::allreduce, "chain", 4, 8, loopback_tcp_model),
            std::nullopt);
  EXPECT_EQ(modelled_seconds(collective_op::allreduce, "ring", 1, 8, loopback_tcp_model), 0.0);
  // Recursive doubling on 2 ranks: one message and one reduction of all n bytes.
  const auto& m = loopback_tcp_model;
  EXPECT_DOUBLE_EQ(*modelled_seconds(collective_op::allreduce, "recursive_doubling", 2, 1000, m),
                   m.alpha_s + 1000 * (m.beta_s_per_byte + m.gamma_s_per_byte));
}

TEST(CollectivesSelection, ProcessEnvReadsTheEnvironment) {
  const auto env = process_env();
  EXPECT_TRUE(env("PATH").has_value());
  EXPECT_FALSE(env("VESSEL_SELECTION_TEST_SURELY_UNSET_VARIABLE").has_value());
}

TEST(CollectivesSelection, OperationNamesRoundTrip) {
  for (collective_op op : all_collective_ops) {
    EXPECT_EQ(parse_collective_op(to_string(op)), op);
  }
  EXPECT_FALSE(parse_collective_op("all_reduce"));
}

}  // namespace
}  // namespace vessel::collectives
