#pragma once
// How a message is cut into chunks. Both ends of a link compute the same layout from the
// algorithm's parameters, so a chunk index alone says which bytes a chunk carries.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "collectives/algorithms/partition.hpp"

namespace vessel::collectives {

/// `total` bytes cut into chunks of `chunk` bytes, the last one shorter. A `split` strictly
/// inside the message cuts it once more so that no chunk straddles it (gather and scatter use it
/// where relative rank order wraps around to absolute rank 0).
class chunk_layout {
 public:
  constexpr chunk_layout() noexcept = default;
  constexpr chunk_layout(std::size_t total, std::size_t chunk, std::size_t split = 0) noexcept
      : chunk_(chunk),
        first_(split > 0 && split < total ? split : total),
        total_(total),
        first_count_(chunks_in(first_, chunk)),
        count_(first_count_ + chunks_in(total - first_, chunk)) {}

  /// Chunks in the message; 0 for an empty message.
  constexpr std::size_t count() const noexcept { return count_; }
  constexpr std::size_t total_bytes() const noexcept { return total_; }

  /// The bytes chunk `i` (< count()) carries, relative to the start of the message.
  constexpr byte_range at(std::size_t i) const noexcept {
    if (i < first_count_) return piece(0, first_, i);
    return piece(first_, total_ - first_, i - first_count_);
  }

  /// Whether every chunk index fits the 32-bit chunk field of a frame.
  constexpr bool fits_chunk_field() const noexcept {
    return count_ <= std::numeric_limits<std::uint32_t>::max();
  }

 private:
  static constexpr std::size_t chunks_in(std::size_t bytes, std::size_t chunk) noexcept {
    return chunk == 0 ? 0 : (bytes + chunk - 1) / chunk;
  }
  constexpr byte_range piece(std::size_t base, std::size_t bytes, std::size_t i) const noexcept {
    const std::size_t offset = i * chunk_;
    return {base + offset, std::min(chunk_, bytes - offset)};
  }

  std::size_t chunk_ = 1;
  std::size_t first_ = 0;
  std::size_t total_ = 0;
  std::size_t first_count_ = 0;
  std::size_t count_ = 0;
};

}  // namespace vessel::collectives
