#pragma once
// Rabenseifner's allreduce (large vectors, few ranks or log-depth wanted): recursive halving
// reduce-scatter, then recursive doubling allgather. Each rank sends 2 (p-1)/p n bytes in
// 2 log2(p) rounds. The vector is cut into p' blocks (p' the power of two below p, uneven by at
// most one element); in halving round k a rank keeps the half of its window on its side of bit
// (log2 p' - k) of its new rank, sends the other half to the partner across that bit, and
// reduces the partner's copy of its kept half in; at the end new rank i owns block i reduced.
// Every block is reduced on one rank only and then copied, so floats are bit-identical on every
// rank. A world that is not a power of two is folded as in recursive doubling.
//
// Rounds: 0 fold, 1..L halving, L+1..2L doubling, 2L+1 unfold (L = log2 p').

#include "collectives/algorithms/stepwise.hpp"

namespace vessel::collectives {

class rabenseifner_allreduce final : public stepwise_algorithm {
 public:
  explicit rabenseifner_allreduce(const algorithm_params& params);

  std::string_view name() const noexcept override { return "rabenseifner"; }

 private:
  std::uint32_t rounds() const noexcept override { return 2 * fold_.levels + 2; }
  round_plan plan(std::uint32_t round) const noexcept override;
  result<void> prepare(const algorithm_buffers& buffers) override;
  result<void> apply(std::uint32_t round, byte_range where,
                     std::span<const std::byte> data) override;
  result<void> begin_round(std::uint32_t round) override;

  /// Bytes of blocks [first, last) (new ranks).
  byte_range blocks(std::uint32_t first, std::uint32_t last) const noexcept;

  fold_plan fold_;
  std::size_t bytes_;
};

}  // namespace vessel::collectives
