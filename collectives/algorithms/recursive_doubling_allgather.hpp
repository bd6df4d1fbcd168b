#pragma once
// Recursive doubling allgather: log2(p) rounds; in round k a rank swaps everything it has with
// the partner whose rank differs in bit k - 1, so what it holds doubles each round. Latency
// log2(p) alpha, each rank sends (p-1) blocks. A world that is not a power of two is folded
// (MPICH): an extra hands its block to the odd rank above it, which carries both; as new ranks
// keep old rank order, every window of new ranks is a contiguous run of blocks. The extras get
// the whole result back at the end.
//
// params.count is one rank's block: the input holds count elements, the output size * count
// with block r at r * count; the input may already sit there (in place).
// Rounds: 0 fold, 1..log2(p') exchange, log2(p') + 1 unfold.

#include "collectives/algorithms/stepwise.hpp"

namespace vessel::collectives {

class recursive_doubling_allgather final : public stepwise_algorithm {
 public:
  explicit recursive_doubling_allgather(const algorithm_params& params);

  std::string_view name() const noexcept override { return "recursive_doubling"; }

 private:
  std::uint32_t rounds() const noexcept override { return fold_.levels + 2; }
  round_plan plan(std::uint32_t round) const noexcept override;
  result<void> prepare(const algorithm_buffers& buffers) override;
  result<void> apply(std::uint32_t round, byte_range where,
                     std::span<const std::byte> data) override;

  /// The output bytes of the blocks carried by new ranks [first, last).
  byte_range carried(std::uint32_t first, std::uint32_t last) const noexcept;

  fold_plan fold_;
  std::size_t block_bytes_;
};

}  // namespace vessel::collectives
