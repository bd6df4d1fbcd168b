#pragma once
// Binomial tree gather to any root: a rank collects the blocks of its subtree (relative ranks
// vrank .. vrank + subtree - 1, in that order) and passes them to its parent in one chunked
// message; the root writes each chunk straight to its place in absolute rank order.
// ceil(log2 p) levels; the root receives p - 1 blocks over log2 p links instead of p - 1.
//
// Buffers: count is one rank's block. input holds it on every rank; output (p blocks, block j
// from rank j) at the root only. In place at the root: input is output's block `root` (or
// aliases it). An inner rank collects in scratch (scratch_bytes()); a leaf sends from input.
// A region is never written after it is sent, so a driver may send it without copying it.

#include <array>
#include <cstdint>
#include <string_view>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/algorithms/binomial_tree.hpp"

namespace vessel::collectives {

class binomial_gather final : public algorithm {
 public:
  explicit binomial_gather(const algorithm_params& params) noexcept;

  std::string_view name() const noexcept override { return "binomial_gather"; }
  std::size_t scratch_bytes() const noexcept override;
  result<void> start(const algorithm_buffers& buffers, std::vector<send_step>& out) override;
  result<receive_status> on_receive(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                                    std::span<const std::byte> data,
                                    std::vector<send_step>& out) override;
  bool done() const noexcept override { return started_ && pending_ == 0; }
  std::uint32_t waiting_for(std::vector<std::uint32_t>& peers) const override;

 private:
  /// The whole subtree is in: pass it up (the root has nothing more to do).
  void send_up(std::vector<send_step>& out) const;

  const algorithm_params params_;
  const bool valid_;
  binomial_tree tree_;
  std::size_t block_ = 0;
  std::size_t chunk_ = 0;
  algorithm_buffers buffers_;
  std::array<chunk_layout, 32> child_layout_{};
  std::array<std::size_t, 32> next_chunk_{};  ///< per child: chunks in (in order)
  std::size_t pending_ = 0;                   ///< chunks still to come from all children
  bool started_ = false;
};

}  // namespace vessel::collectives
