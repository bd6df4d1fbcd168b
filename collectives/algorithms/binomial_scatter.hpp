#pragma once
// Binomial tree scatter from any root: the root sends each child the blocks of the child's whole
// subtree in one chunked message (largest subtree first), and every rank forwards the part of
// its message that belongs to a child as soon as that part has arrived. ceil(log2 p) levels.
//
// Buffers: count is one rank's block. input (p blocks, block j for rank j) at the root only;
// output (one block) on every rank. In place at the root: output is input's block `root` (or
// aliases it). An inner rank receives its subtree's blocks in scratch (scratch_bytes()); a leaf
// receives straight into output. A region is never written after it is sent, so a driver may
// send it without copying it.

#include <array>
#include <cstdint>
#include <string_view>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/algorithms/binomial_tree.hpp"

namespace vessel::collectives {

class binomial_scatter final : public algorithm {
 public:
  explicit binomial_scatter(const algorithm_params& params) noexcept;

  std::string_view name() const noexcept override { return "binomial_scatter"; }
  std::size_t scratch_bytes() const noexcept override;
  result<void> start(const algorithm_buffers& buffers, std::vector<send_step>& out) override;
  result<receive_status> on_receive(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                                    std::span<const std::byte> data,
                                    std::vector<send_step>& out) override;
  bool done() const noexcept override { return started_ && received_ == layout_.count(); }
  std::uint32_t waiting_for(std::vector<std::uint32_t>& peers) const override;

 private:
  /// Sends every child whose blocks have all arrived (children are in ascending order, so their
  /// ranges are consecutive pieces of our message).
  void forward_ready(std::vector<send_step>& out);

  const algorithm_params params_;
  const bool valid_;
  binomial_tree tree_;
  std::size_t block_ = 0;
  std::size_t chunk_ = 0;
  algorithm_buffers buffers_;
  chunk_layout layout_;         ///< of the message from our parent
  std::size_t received_ = 0;    ///< chunks in (in order)
  std::size_t prefix_ = 0;      ///< bytes of our message in so far
  std::size_t next_child_ = 0;  ///< the first child not yet sent to
  bool own_copied_ = false;
  bool started_ = false;
};

}  // namespace vessel::collectives
