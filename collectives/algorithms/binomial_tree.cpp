#include "collectives/algorithms/binomial_tree.hpp"

#include <algorithm>

namespace vessel::collectives {

binomial_tree::binomial_tree(std::uint32_t rank, std::uint32_t size, std::uint32_t root) noexcept
    : size_(size), root_(root), vrank_((rank + size - root) % size) {
  // The lowest set bit of vrank bounds both the subtree and the children's distances; the root
  // has none, so its bound is the whole communicator.
  const std::uint64_t low = vrank_ == 0 ? std::uint64_t{size} : (vrank_ & (~vrank_ + 1));
  if (vrank_ != 0) parent_ = to_absolute(vrank_ - static_cast<std::uint32_t>(low));
  subtree_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(low, size_ - vrank_));
  for (std::uint64_t distance = 1; distance < low && vrank_ + distance < size_; distance <<= 1) {
    const auto child = static_cast<std::uint32_t>(vrank_ + distance);
    const auto span = static_cast<std::uint32_t>(std::min<std::uint64_t>(distance, size_ - child));
    children_[count_++] = {to_absolute(child), child, span};
  }
}

std::optional<std::size_t> binomial_tree::child_index(std::uint32_t rank) const noexcept {
  for (std::size_t i = 0; i < count_; ++i) {
    if (children_[i].rank == rank) return i;
  }
  return std::nullopt;
}

}  // namespace vessel::collectives
