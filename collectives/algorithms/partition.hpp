#pragma once
// How algorithms cut a vector into per-rank blocks and blocks into pipelined chunks, and how
// they fold a world that is not a power of two onto one that is. Every rank computes the same
// cuts from the same parameters, so nothing about them travels on the wire.

#include <bit>
#include <cstddef>
#include <cstdint>

namespace vessel::collectives {

/// A byte range inside one of the algorithm's buffers.
struct byte_range {
  std::size_t offset = 0;
  std::size_t bytes = 0;
  bool operator==(const byte_range&) const = default;
};

/// Block `i` of `count` elements split into `parts` blocks: the first count % parts blocks get
/// one element more, so blocks differ by at most one element and any count works.
constexpr byte_range block_range(std::size_t count, std::size_t parts, std::size_t i,
                                 std::size_t element_bytes) noexcept {
  const std::size_t base = count / parts;
  const std::size_t extra = count % parts;
  const std::size_t first = i * base + (i < extra ? i : extra);
  const std::size_t elements = base + (i < extra ? 1 : 0);
  return {first * element_bytes, elements * element_bytes};
}

/// chunk_bytes rounded down to whole elements, at least one element.
constexpr std::size_t chunk_granule(std::size_t chunk_bytes, std::size_t element_bytes) noexcept {
  const std::size_t elements = chunk_bytes / element_bytes;
  return (elements == 0 ? 1 : elements) * element_bytes;
}

/// Chunks a range of `bytes` travels in (an empty range travels in none).
constexpr std::uint32_t chunk_count(std::size_t bytes, std::size_t granule) noexcept {
  return static_cast<std::uint32_t>((bytes + granule - 1) / granule);
}

/// Chunk `c` of `range`.
constexpr byte_range chunk_of(byte_range range, std::size_t granule, std::uint32_t c) noexcept {
  const std::size_t begin = std::size_t{c} * granule;
  const std::size_t bytes = range.bytes - begin < granule ? range.bytes - begin : granule;
  return {range.offset + begin, bytes};
}

/// The MPICH fold of a world of `size` ranks onto the largest power of two `pof2` <= size:
/// among the first 2 * rem ranks (rem = size - pof2), each even rank hands its data to the odd
/// rank above it and sits out (an "extra"); the odd rank carries both (it is "folded"). The
/// pof2 remaining ranks get dense new ranks; new rank order follows old rank order, so a
/// window of new ranks covers a contiguous run of old ranks.
struct fold_plan {
  enum class role : std::uint8_t { plain, folded, extra };

  std::uint32_t size = 1;
  std::uint32_t pof2 = 1;
  std::uint32_t rem = 0;
  std::uint32_t levels = 0;  ///< log2(pof2)

  constexpr explicit fold_plan(std::uint32_t world_size) noexcept
      : size(world_size == 0 ? 1 : world_size),
        pof2(std::bit_floor(size)),
        rem(size - pof2),
        levels(static_cast<std::uint32_t>(std::countr_zero(pof2))) {}

  constexpr role role_of(std::uint32_t rank) const noexcept {
    if (rank >= 2 * rem) return role::plain;
    return rank % 2 == 0 ? role::extra : role::folded;
  }
  /// The new rank of a rank that is not an extra.
  constexpr std::uint32_t new_rank(std::uint32_t rank) const noexcept {
    return rank < 2 * rem ? rank / 2 : rank - rem;
  }
  /// The old rank behind a new rank.
  constexpr std::uint32_t old_rank(std::uint32_t new_rank) const noexcept {
    return new_rank < rem ? 2 * new_rank + 1 : new_rank + rem;
  }
  /// The first old rank whose data a new rank carries (old_rank - 1 for a folded rank); for
  /// new_rank == pof2 this is `size`, so [first_old(a), first_old(b)) is the old ranks behind
  /// the new ranks [a, b).
  constexpr std::uint32_t first_old(std::uint32_t new_rank) const noexcept {
    return new_rank < rem ? 2 * new_rank : new_rank + rem;
  }
};

}  // namespace vessel::collectives
