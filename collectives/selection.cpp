#include "collectives/selection.hpp"

#include <bit>
#include <cctype>
#include <cstdlib>
#include <utility>

#include "collectives/errc.hpp"

namespace vessel::collectives {
namespace {

constexpr std::string_view barrier_names[] = {"dissemination"};
constexpr std::string_view broadcast_names[] = {"binomial", "chain"};
constexpr std::string_view tree_names[] = {"binomial"};  // reduce, gather, scatter
// ring before rabenseifner: on two ranks they are the same exchange and ring pipelines it.
constexpr std::string_view allreduce_names[] = {"recursive_doubling", "ring", "rabenseifner"};
constexpr std::string_view allgather_names[] = {"recursive_doubling", "ring"};
constexpr std::string_view ring_names[] = {"ring"};
constexpr std::string_view alltoall_names[] = {"pairwise"};

std::size_t index_of(collective_op op) noexcept { return static_cast<std::size_t>(op); }

/// The table's own copy of a name, so a selection outlives the string it was asked with.
std::optional<std::string_view> canonical(collective_op op, std::string_view name) noexcept {
  for (std::string_view known : algorithm_names(op)) {
    if (known == name) return known;
  }
  return std::nullopt;
}

bool means_table(std::string_view name) noexcept { return name.empty() || name == "auto"; }

/// The algorithm the model prefers; ties go to the earlier name.
std::string_view cheapest(collective_op op, std::uint32_t world, std::size_t bytes,
                          const link_model& model) noexcept {
  const auto names = algorithm_names(op);
  std::string_view best = names.front();
  double best_cost = *modelled_seconds(op, best, world, bytes, model);
  for (std::string_view name : names.subspan(1)) {
    const double cost = *modelled_seconds(op, name, world, bytes, model);
    if (cost < best_cost) {
      best = name;
      best_cost = cost;
    }
  }
  return best;
}

/// Appends the rules for worlds [min_world, max_world], modelled at `representative` ranks: one
/// per range of message sizes with the same cheapest algorithm, boundaries found by bisection.
void append_model_rules(std::vector<selection_rule>& rules, collective_op op,
                        std::uint32_t min_world, std::uint32_t max_world,
                        std::uint32_t representative, const link_model& model) {
  auto emit = [&](std::size_t max_bytes, std::string_view algorithm) {
    rules.push_back({op, min_world, max_world, max_bytes, std::string{algorithm}});
  };
  std::string_view current = cheapest(op, representative, 0, model);
  std::size_t known_current = 0;  // largest size known to pick `current`
  for (int shift = 0; shift <= 40; ++shift) {
    const std::size_t probe = std::size_t{1} << shift;
    while (cheapest(op, representative, probe, model) != current) {
      std::size_t low = known_current, high = probe;
      while (high - low > 1) {
        const std::size_t middle = low + (high - low) / 2;
        (cheapest(op, representative, middle, model) == current ? low : high) = middle;
      }
      emit(low, current);
      current = cheapest(op, representative, high, model);
      known_current = high;
    }
    known_current = probe;
  }
  emit(SIZE_MAX, current);
}

std::vector<std::vector<selection_rule>> model_rules(const link_model& model) {
  std::vector<std::vector<selection_rule>> per_op(all_collective_ops.size());
  for (collective_op op : all_collective_ops) {
    auto& rules = per_op[index_of(op)];
    for (std::uint32_t world = 1; world <= 64; ++world) {
      append_model_rules(rules, op, world, world, world, model);
    }
    for (std::uint32_t power = 128; power <= 65536; power *= 2) {
      append_model_rules(rules, op, power / 2 + 1, power - 1, power / 4 * 3, model);
      append_model_rules(rules, op, power, power, power, model);
    }
    append_model_rules(rules, op, 65537, UINT32_MAX, 98304, model);
  }
  return per_op;
}

}  // namespace

std::span<const std::string_view> algorithm_names(collective_op op) noexcept {
  switch (op) {
    case collective_op::barrier: return barrier_names;
    case collective_op::broadcast: return broadcast_names;
    case collective_op::reduce:
    case collective_op::gather:
    case collective_op::scatter: return tree_names;
    case collective_op::allreduce: return allreduce_names;
    case collective_op::allgather: return allgather_names;
    case collective_op::reduce_scatter: return ring_names;
    case collective_op::alltoall: return alltoall_names;
  }
  return {};
}

std::optional<double> modelled_seconds(collective_op op, std::string_view algorithm,
                                       std::uint32_t world, std::size_t bytes,
                                       const link_model& m) noexcept {
  if (!canonical(op, algorithm)) return std::nullopt;
  if (world <= 1) return 0.0;
  const double p = world;
  const double n = static_cast<double>(bytes);
  const double a = m.alpha_s, b = m.beta_s_per_byte, g = m.gamma_s_per_byte;
  const double rounds = std::bit_width(world - 1);  // ceil(log2 p)
  const bool power_of_two = std::has_single_bit(world);
  // Recursive algorithms fold a world that is not a power of two onto pof2 ranks (MPICH).
  const double pof2 = std::bit_floor(world);
  const double levels = std::bit_width(std::bit_floor(world)) - 1;  // log2(pof2)
  switch (op) {
    case collective_op::barrier: return rounds * a;
    case collective_op::broadcast: {
      if (algorithm == "binomial") return rounds * (a + n * b);
      // chain: chunks flow down p - 1 links; the last leaves the root after k - 1 others.
      const double chunks = bytes == 0 ? 1.0 : static_cast<double>((bytes + m.chunk_bytes - 1) /
                                                                   m.chunk_bytes);
      return (p - 2 + chunks) * (a + n / chunks * b);
    }
    case collective_op::reduce: return rounds * (a + n * b + n * g);
    case collective_op::allreduce: {
      if (algorithm == "recursive_doubling") {
        if (power_of_two) return levels * (a + n * b + n * g);
        return (levels + 2) * (a + n * b) + (levels + 1) * n * g;
      }
      if (algorithm == "ring") return 2 * (p - 1) * a + (p - 1) / p * n * (2 * b + g);
      // rabenseifner: recursive halving reduce-scatter, recursive doubling allgather.
      if (power_of_two) return 2 * levels * a + (p - 1) / p * n * (2 * b + g);
      return 2 * levels * a + (pof2 - 1) / pof2 * n * (2 * b + g) + 2 * (a + n * b) + n * g;
    }
    case collective_op::allgather: {
      if (algorithm == "ring") return (p - 1) * (a + n * b);
      if (power_of_two) return levels * a + (p - 1) * n * b;
      // Folded: the extra hands its block over first and gets all p blocks back at the end.
      return (levels + 2) * a + (p - 1) * n * b + n * b + p * n * b;
    }
    case collective_op::reduce_scatter: return (p - 1) * (a + n * b + n * g);
    case collective_op::gather:
    case collective_op::scatter: return rounds * a + (p - 1) * n * b;
    case collective_op::alltoall: return (p - 1) * (a + n * b);
  }
  return std::nullopt;
}

std::span<const selection_rule> measured_rules() noexcept {
  // vessel-bench coll with VESSEL_ALGO_<OP> forcing each algorithm, 2 and 4 ranks, loopback TCP
  // and shared memory (docs/collective_algorithms.md, "Measured thresholds"). One table serves
  // both transports (the selector does not know the link), so each boundary sits where the
  // two transports' crossovers together lose least. Bytes as select() takes them.
  constexpr std::size_t kib = 1024, mib = 1024 * kib;
  using op = collective_op;
  static const std::vector<selection_rule> rules = {
      // Re-measured 2026-12-01 on a quiet machine (4 rounds): the ring, which lands and lends its
      // chunks since, is ahead from 64 KiB on both transports (64-512 KiB: 0.76-0.94x the time).
      {op::allreduce, 2, 2, 32 * kib, "recursive_doubling"},
      // Over shared memory the 2026-12-05 table ran whole halves (Rabenseifner) from 384 KiB to
      // 1 MiB, where the ring was bistable on that AMD guest (1 MiB: 122-127 or 205-258 us
      // against 123-181). On an Intel KVM guest (2026-12-06, 3 interleaved rounds) whole halves
      // take 1.3-1.9x the ring's time at every size from 384 KiB (1 MiB 293-300 against 167-171,
      // Open MPI's vader 190), and the ring's slow stretch on AMD was still within vader's time
      // there (244-265); so the ring, on both transports (over TCP Rabenseifner took 1.2-1.4x its
      // time).
      {op::allreduce, 2, 2, SIZE_MAX, "ring"},
      // 4 ranks (2026-12-01, 5 rounds): over shm the ring is ahead from 16 KiB (64-256 KiB at
      // 0.56x recursive doubling's time); over TCP recursive doubling leads at 16 KiB,
      // Rabenseifner at 64 KiB (the ring 1.14x its time), the ring from 128 KiB.
      {op::allreduce, 4, 4, 32 * kib, "recursive_doubling"},
      {op::allreduce, 4, 4, SIZE_MAX, "ring"},
      {op::broadcast, 2, 2, SIZE_MAX, "chain"},  // pipelined chunks beat one whole message
      // 4 ranks (2026-12-01, 4 rounds, with the rendezvous and lent chunks): binomial ahead up to
      // 16 MiB over shm (1 MiB 342 against 411 us, 16 MiB 7864 against 8939), about even over TCP;
      // the chain from 64 MiB (shm 37.2 against 40.3 ms).
      {op::broadcast, 4, 4, 16 * mib, "binomial"},
      {op::broadcast, 4, 4, SIZE_MAX, "chain"},
      {op::allgather, 2, 2, SIZE_MAX, "ring"},
      {op::allgather, 4, 4, SIZE_MAX, "ring"},
  };
  return rules;
}

env_lookup process_env() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string{name}.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string{value};
  };
}

algorithm_selector::algorithm_selector(const link_model& model)
    : rules_{model_rules(model)}, forced_(all_collective_ops.size()) {
  for (auto& per_op : rules_) {
    std::vector<selection_rule> merged;
    for (const selection_rule& rule : measured_rules()) {
      if (rule.op == per_op.front().op) merged.push_back(rule);
    }
    per_op.insert(per_op.begin(), merged.begin(), merged.end());
  }
}

algorithm_selector algorithm_selector::model_only(const link_model& model) {
  algorithm_selector selector{model};
  selector.rules_ = model_rules(model);
  return selector;
}

result<algorithm_selector> algorithm_selector::from_table(std::vector<selection_rule> rules,
                                                          const link_model& model) {
  for (const selection_rule& rule : rules) {
    if (index_of(rule.op) >= all_collective_ops.size()) return errc::invalid_argument;
    if (!canonical(rule.op, rule.algorithm)) return errc::unknown_algorithm;
    if (rule.min_world > rule.max_world) return errc::invalid_argument;
  }
  algorithm_selector selector{model};
  for (auto& modelled : selector.rules_) {
    std::vector<selection_rule> merged;
    for (const selection_rule& rule : rules) {
      if (rule.op == modelled.front().op) merged.push_back(rule);
    }
    merged.insert(merged.end(), modelled.begin(), modelled.end());
    modelled = std::move(merged);
  }
  return selector;
}

std::string algorithm_selector::env_name(collective_op op) {
  std::string name{"VESSEL_ALGO_"};
  for (char c : to_string(op)) {
    name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

result<void> algorithm_selector::apply_env(const env_lookup& lookup) {
  std::vector<std::string> forced = forced_;
  for (collective_op op : all_collective_ops) {
    const auto value = lookup(env_name(op));
    if (!value) continue;
    if (*value == "auto") {
      forced[index_of(op)].clear();
      continue;
    }
    if (!canonical(op, *value)) return errc::unknown_algorithm;
    forced[index_of(op)] = *value;
  }
  forced_ = std::move(forced);
  return outcome::success();
}

result<void> algorithm_selector::force(collective_op op, std::string_view algorithm) {
  if (index_of(op) >= all_collective_ops.size()) return errc::invalid_argument;
  if (means_table(algorithm)) {
    forced_[index_of(op)].clear();
    return outcome::success();
  }
  if (!canonical(op, algorithm)) return errc::unknown_algorithm;
  forced_[index_of(op)] = std::string{algorithm};
  return outcome::success();
}

result<std::string_view> algorithm_selector::select(collective_op op, std::uint32_t world,
                                                    std::size_t bytes, std::string_view per_call,
                                                    link_class links) const {
  if (index_of(op) >= all_collective_ops.size() || world == 0) return errc::invalid_argument;
  if (!means_table(per_call)) {
    if (auto name = canonical(op, per_call)) return *name;
    return errc::unknown_algorithm;
  }
  if (const std::string& forced = forced_[index_of(op)]; !forced.empty()) {
    return *canonical(op, forced);
  }
  for (const selection_rule& rule : rules_[index_of(op)]) {
    if (rule.shared_memory_only && links != link_class::shared_memory) continue;
    if (rule.min_world <= world && world <= rule.max_world && bytes <= rule.max_bytes) {
      return *canonical(op, rule.algorithm);
    }
  }
  return algorithm_names(op).front();  // unreachable: the model covers every world and size
}

std::span<const selection_rule> algorithm_selector::rules(collective_op op) const noexcept {
  if (index_of(op) >= rules_.size()) return {};
  return rules_[index_of(op)];
}

}  // namespace vessel::collectives
