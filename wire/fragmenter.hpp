#pragma once
// How a message of total_len bytes is cut into data frames (DataHeader.fragmentIndex/Count/Offset in
// wire/frame.capnp). Every fragment but the last holds exactly fragment_size bytes and starts at
// index * fragment_size; the reassembler (wire/reassembler.hpp) rejects any other layout.

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>

#include "wire/errc.hpp"
#include "wire/result.hpp"

namespace vessel::wire {

/// One fragment of a message: its place in the sequence and the bytes it carries.
struct fragment {
  std::uint32_t index = 0;   ///< 0-based position, < count.
  std::uint32_t count = 0;   ///< fragments in the message, >= 1.
  std::uint64_t offset = 0;  ///< first byte of this fragment within the message.
  std::uint64_t length = 0;  ///< bytes in this fragment; 0 only for the empty message.

  friend constexpr bool operator==(const fragment&, const fragment&) = default;
};

/// The fragments of one message, as a random-access sequence computed on the fly (no allocation).
class fragmenter {
 public:
  class iterator;

  /// The layout of a total_len-byte message in fragments of at most fragment_size bytes:
  /// count = ceil(total_len / fragment_size), at least 1 so that an empty message is still sent.
  /// Fails with bad_field if fragment_size is 0, too_many_fragments if the count exceeds a u32.
  static result<fragmenter> make(std::uint64_t total_len, std::uint64_t fragment_size) noexcept {
    if (fragment_size == 0) return make_error_code(errc::bad_field);
    const std::uint64_t count = total_len == 0 ? 1 : (total_len - 1) / fragment_size + 1;
    if (count > std::numeric_limits<std::uint32_t>::max()) {
      return make_error_code(errc::too_many_fragments);
    }
    return fragmenter{total_len, fragment_size, static_cast<std::uint32_t>(count)};
  }

  constexpr std::uint64_t total_len() const noexcept { return total_len_; }
  constexpr std::uint64_t fragment_size() const noexcept { return fragment_size_; }
  /// Number of fragments, >= 1.
  constexpr std::uint32_t count() const noexcept { return count_; }

  /// Fragment `index`; precondition index < count().
  constexpr fragment operator[](std::uint32_t index) const noexcept {
    const std::uint64_t offset = std::uint64_t{index} * fragment_size_;
    const std::uint64_t length = index + 1 == count_ ? total_len_ - offset : fragment_size_;
    return {index, count_, offset, length};
  }

  constexpr iterator begin() const noexcept;
  constexpr iterator end() const noexcept;

 private:
  constexpr fragmenter(std::uint64_t total_len, std::uint64_t fragment_size,
                       std::uint32_t count) noexcept
      : total_len_(total_len), fragment_size_(fragment_size), count_(count) {}

  std::uint64_t total_len_;
  std::uint64_t fragment_size_;
  std::uint32_t count_;
};

/// Yields fragments by value, in index order. Holds a copy of the 24-byte layout, so it stays valid
/// after the fragmenter is gone. (The fragmenter itself must outlive a range-for over it: in C++20
/// `for (fragment f : fragmenter::make(n, s).value())` reads a destroyed result; name it first.)
class fragmenter::iterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = fragment;
  using difference_type = std::ptrdiff_t;
  using reference = fragment;
  using pointer = void;

  constexpr iterator() noexcept = default;

  constexpr fragment operator*() const noexcept {
    return layout_[static_cast<std::uint32_t>(index_)];
  }
  constexpr iterator& operator++() noexcept {
    ++index_;
    return *this;
  }
  constexpr iterator operator++(int) noexcept {
    iterator before = *this;
    ++index_;
    return before;
  }
  friend constexpr bool operator==(const iterator& a, const iterator& b) noexcept {
    return a.index_ == b.index_;
  }

 private:
  friend class fragmenter;
  constexpr iterator(const fragmenter& layout, std::uint64_t index) noexcept
      : layout_(layout), index_(index) {}

  fragmenter layout_{0, 1, 1};
  std::uint64_t index_ = 0;  // u64 so that end() == count is representable when count == 2^32-1
};

constexpr fragmenter::iterator fragmenter::begin() const noexcept { return {*this, 0}; }
constexpr fragmenter::iterator fragmenter::end() const noexcept { return {*this, count_}; }

}  // namespace vessel::wire
