#pragma once
// Binomial tree reduce to any root, pipelined by chunks: a rank reduces chunk c of its children
// into its own and passes it up as soon as every child's chunk c is in. ceil(log2 p) levels.
//
// Buffers: input (count elements) on every rank; the result lands in output at the root only
// (other ranks leave output untouched and may pass it empty). In place at the root: input
// aliases output. An inner rank accumulates in scratch (scratch_bytes()); a leaf sends straight
// from input. avg is summed up the tree and divided by p once, at the root.
//
// Determinism: floating-point reduction is not associative, so every chunk is reduced in one
// fixed order (own data, then children by ascending distance) whatever order chunks arrive in;
// a child's chunk that comes before an earlier child's gets not_yet. A region is never written
// after it is sent, so a driver may send it without copying it.

#include <array>
#include <cstdint>
#include <string_view>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/algorithms/binomial_tree.hpp"
#include "collectives/algorithms/chunk_layout.hpp"

namespace vessel::collectives {

class binomial_reduce final : public algorithm {
 public:
  explicit binomial_reduce(const algorithm_params& params) noexcept;

  std::string_view name() const noexcept override { return "binomial_reduce"; }
  std::size_t scratch_bytes() const noexcept override;
  result<void> start(const algorithm_buffers& buffers, std::vector<send_step>& out) override;
  result<receive_status> on_receive(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                                    std::span<const std::byte> data,
                                    std::vector<send_step>& out) override;
  bool done() const noexcept override;
  std::uint32_t waiting_for(std::vector<std::uint32_t>& peers) const override;

 private:
  /// Chunk c is reduced over the whole subtree: pass it up, or finish it at the root.
  result<void> complete_chunk(std::size_t chunk, std::vector<send_step>& out);

  const algorithm_params params_;
  const bool valid_;
  binomial_tree tree_;
  chunk_layout layout_;
  algorithm_buffers buffers_;
  std::span<std::byte> accumulator_;  ///< output at the root, scratch at an inner rank
  buffer_id accumulator_id_ = buffer_id::output;
  std::array<std::size_t, 32> next_chunk_{};  ///< per child: chunks reduced so far (in order)
  std::size_t completed_ = 0;                 ///< chunks reduced over the whole subtree
  bool started_ = false;
};

}  // namespace vessel::collectives
