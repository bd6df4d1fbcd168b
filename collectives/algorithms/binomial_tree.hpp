#pragma once
// The binomial tree over a communicator, rooted anywhere: ranks are renumbered relative to the
// root (v = (rank - root) mod size), v's parent is v with its lowest set bit cleared, and its
// children are v + 2^k for every 2^k below that bit. Works for any size, not only powers of two:
// a child past the end is left out. Broadcast, reduce, gather and scatter share it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "collectives/algorithms/chunk_layout.hpp"

namespace vessel::collectives {

struct tree_child {
  std::uint32_t rank = 0;     ///< absolute rank
  std::uint32_t vrank = 0;    ///< rank relative to the root
  std::uint32_t subtree = 0;  ///< ranks in the child's subtree, the child included
};

class binomial_tree {
 public:
  /// Requires rank < size and root < size.
  binomial_tree(std::uint32_t rank, std::uint32_t size, std::uint32_t root) noexcept;

  std::uint32_t size() const noexcept { return size_; }
  std::uint32_t vrank() const noexcept { return vrank_; }
  bool is_root() const noexcept { return vrank_ == 0; }
  /// Absolute rank of the parent; meaningless at the root.
  std::uint32_t parent() const noexcept { return parent_; }
  /// Ranks in this node's subtree (relative ranks vrank() .. vrank() + subtree() - 1).
  std::uint32_t subtree() const noexcept { return subtree_; }
  /// Children by ascending distance, so by ascending subtree size.
  std::span<const tree_child> children() const noexcept { return {children_.data(), count_}; }
  /// Index into children() of the child with absolute rank `rank`, if it is one.
  std::optional<std::size_t> child_index(std::uint32_t rank) const noexcept;

  std::uint32_t to_absolute(std::uint32_t vrank) const noexcept { return (vrank + root_) % size_; }
  /// The relative rank at which absolute rank order wraps around to 0 (size when root is 0).
  std::uint32_t wrap_vrank() const noexcept { return size_ - root_; }

  /// The chunks of a message carrying the blocks of relative ranks [vrank, vrank + ranks), one
  /// block of `block` bytes each, cut where absolute rank order wraps around so that at the
  /// root every chunk is one contiguous piece of an absolutely ordered buffer. Gather and
  /// scatter give every message this layout, so both ends agree on it.
  chunk_layout blocks_layout(std::uint32_t vrank, std::uint32_t ranks, std::size_t block,
                             std::size_t chunk) const noexcept {
    const std::uint32_t wrap = wrap_vrank();
    const std::size_t split = vrank < wrap && wrap < vrank + ranks ? (wrap - vrank) * block : 0;
    return {std::size_t{ranks} * block, chunk, split};
  }
  /// Where the byte at `position` in relative rank order lies in absolute rank order.
  std::size_t absolute_offset(std::size_t position, std::size_t block) const noexcept {
    const std::size_t wrap = std::size_t{wrap_vrank()} * block;
    return position < wrap ? position + std::size_t{root_} * block : position - wrap;
  }

 private:
  std::uint32_t size_;
  std::uint32_t root_;
  std::uint32_t vrank_;
  std::uint32_t parent_ = 0;
  std::uint32_t subtree_ = 1;
  std::array<tree_child, 32> children_{};
  std::size_t count_ = 0;
};

}  // namespace vessel::collectives
