#pragma once
// Broadcast down a tree, pipelined by chunks: a rank forwards chunk c to its children as soon as
// chunk c arrives from its parent, so a large message streams down every level at once. The tree
// shape (binomial, chain) is given by the subclass; everything else is shared.
//
// Buffers: the root reads input (count elements) and also leaves them in output; every other
// rank receives into output. In place at the root: input aliases output. Steps: one per chunk,
// step 0, chunk = chunk index; chunks from the parent arrive in order (links are ordered).
// A region is never written after it is sent, so a driver may send it without copying it.
//
// From rendezvous_bytes a child first tells its parent it is ready (an empty step-1 message),
// and the parent sends it nothing before that: a root that sent eagerly ran ahead of its
// receivers by many calls, so that every large chunk arrived before its receive was posted and
// was copied into a pool block and again into place (MPI's rendezvous protocol, per call).

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/algorithms/chunk_layout.hpp"

namespace vessel::collectives {

class tree_broadcast : public algorithm {
 public:
  /// Messages of this size and more go out only once the child said it is ready. 2 ranks
  /// (docs/collective_algorithms.md): 512 KiB-1 MiB take 0.35-0.53x the time over shm and TCP,
  /// 4 MiB 0.51-0.82x; at 64-256 KiB the eager root's head start paid more than the copies cost.
  static constexpr std::size_t rendezvous_bytes = std::size_t{512} << 10;
  static constexpr std::uint32_t data_step = 0;
  static constexpr std::uint32_t ready_step = 1;

  result<void> start(const algorithm_buffers& buffers, std::vector<send_step>& out) override;
  result<receive_status> on_receive(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                                    std::span<const std::byte> data,
                                    std::vector<send_step>& out) override;
  /// Chunk c from the parent: its place in output (received there, no copy out of a block).
  std::span<std::byte> landing(std::uint32_t peer, std::uint32_t step,
                               std::uint32_t chunk) const noexcept override;
  bool done() const noexcept override;
  /// The parent's chunks (none at the root) and, from rendezvous_bytes, each child's ready.
  std::optional<std::uint64_t> chunks_to_receive() const noexcept override;
  std::uint32_t waiting_for(std::vector<std::uint32_t>& peers) const override;

 protected:
  explicit tree_broadcast(const algorithm_params& params) noexcept;
  /// Sets the shape: `children` in the order each chunk goes out (the critical path first).
  void set_shape(std::uint32_t parent, std::span<const std::uint32_t> children) noexcept;

  const algorithm_params params_;

 private:
  /// Chunk `chunk` to child i, lent, from source().
  void send_chunk(std::size_t child, std::size_t chunk, std::vector<send_step>& out) const;
  /// Chunk `chunk` to every child that said it is ready (all of them below rendezvous_bytes).
  void forward(std::size_t chunk, std::vector<send_step>& out) const;
  /// Child i is ready: what it has missed so far goes out.
  void on_ready(std::size_t child, std::vector<send_step>& out);
  /// The root sends from input; everyone else forwards what arrived in output.
  buffer_id source() const noexcept;

  std::uint32_t parent_ = 0;
  std::array<std::uint32_t, 32> children_{};
  std::size_t child_count_ = 0;
  std::array<bool, 32> child_ready_{};
  std::size_t children_ready_ = 0;
  bool rendezvous_ = false;
  chunk_layout layout_;
  algorithm_buffers buffers_;
  std::size_t received_ = 0;  ///< chunks received from the parent (in order)
  bool started_ = false;
};

}  // namespace vessel::collectives
