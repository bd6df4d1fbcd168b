#pragma once
// Recursive doubling allreduce (small vectors): log2(p) rounds, each exchanging the whole vector
// with the partner whose rank differs in one bit and reducing it in; latency-optimal, sends
// log2(p) * n bytes per rank. A world that is not a power of two is first folded (MPICH): the
// extra ranks hand their vector to a neighbour before and get the result back after, two more
// rounds for them. Both partners reduce in the same order (lower new rank's data first), so
// every rank ends with bit-identical floats.
//
// Rounds: 0 fold, 1..log2(p') exchange with new rank ^ 2^(k-1), log2(p') + 1 unfold.

#include "collectives/algorithms/stepwise.hpp"

namespace vessel::collectives {

class recursive_doubling_allreduce final : public stepwise_algorithm {
 public:
  explicit recursive_doubling_allreduce(const algorithm_params& params);

  std::string_view name() const noexcept override { return "recursive_doubling"; }
  /// One chunk: the partner's data is reduced with ours in canonical order there.
  std::size_t scratch_bytes() const noexcept override;

 private:
  std::uint32_t rounds() const noexcept override { return fold_.levels + 2; }
  round_plan plan(std::uint32_t round) const noexcept override;
  result<void> prepare(const algorithm_buffers& buffers) override;
  result<void> apply(std::uint32_t round, byte_range where,
                     std::span<const std::byte> data) override;
  result<void> begin_round(std::uint32_t round) override;

  fold_plan fold_;
  std::size_t bytes_;
};

}  // namespace vessel::collectives
