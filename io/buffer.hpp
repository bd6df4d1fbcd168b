#pragma once
// Reference-counted handles to pooled blocks: `buffer` owns a whole block, `buffer_slice` a byte
// range of one. Copying a handle is one relaxed atomic increment; dropping the last handle returns
// the block to its pool's lock-free free list. Neither ever allocates.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace vessel::io {

class buffer_pool;
class buffer_slice;

namespace detail {

struct size_class;

/// Per-block bookkeeping, kept apart from the payload region so that the region holds payload
/// only (it may be registered with io_uring as is). One cache line each: the reference counts of
/// neighbouring blocks are touched by different threads, and sharing a line would make every
/// copy and release of one block stall the owners of the next (false sharing).
struct alignas(64) block_ctl {
  std::atomic<std::uint32_t> refs{0};       ///< handles alive; stale while the block is free
  std::atomic<std::uint32_t> next_free{0};  ///< free-list link, meaningful only while free
  std::uint32_t index = 0;                  ///< block number within its size class
  std::uint32_t class_index = 0;            ///< = region index in buffer_pool::regions()
  std::byte* data = nullptr;                ///< first byte of the block
  std::size_t size = 0;                     ///< block size of the class
  size_class* owner = nullptr;              ///< where the block returns when refs drops to 0
};

/// Returns a block whose last handle was just dropped to its size class (buffer_pool.cpp).
void return_block(block_ctl* ctl) noexcept;

}  // namespace detail

/// Owner of one pooled block (intrusive reference count). An empty `buffer` is the pool's
/// backpressure signal: the size class asked for had no free block.
/// Thread safety: distinct handles to the same block may be copied and dropped on any threads
/// concurrently (as std::shared_ptr); one handle object must not be mutated from two threads.
class buffer {
 public:
  /// An empty handle: owns nothing.
  buffer() noexcept = default;

  buffer(const buffer& other) noexcept : ctl_{other.ctl_} { retain(); }
  buffer(buffer&& other) noexcept : ctl_{std::exchange(other.ctl_, nullptr)} {}
  buffer& operator=(const buffer& other) noexcept {
    buffer copy{other};
    swap(copy);
    return *this;
  }
  buffer& operator=(buffer&& other) noexcept {
    buffer moved{std::move(other)};
    swap(moved);
    return *this;
  }
  ~buffer() { reset(); }

  /// Drops this handle; the block goes back to its pool if this was the last one.
  void reset() noexcept {
    if (ctl_ == nullptr) return;
    // A count of 1 seen by the sole handle cannot change under it (only a holder can copy), so
    // the common unshared case skips the locked decrement; the count is set again on acquire.
    // acquire/acq_rel: every write through any handle happens-before the block is handed out
    // again.
    if (ctl_->refs.load(std::memory_order_acquire) == 1 ||
        ctl_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      detail::return_block(ctl_);
    }
    ctl_ = nullptr;
  }

  void swap(buffer& other) noexcept { std::swap(ctl_, other.ctl_); }

  /// True when this handle owns a block.
  explicit operator bool() const noexcept { return ctl_ != nullptr; }

  /// The whole block (its size is the size class's block size, at least what was asked for);
  /// empty for an empty handle.
  std::span<std::byte> bytes() const noexcept {
    return ctl_ != nullptr ? std::span<std::byte>{ctl_->data, ctl_->size} : std::span<std::byte>{};
  }
  std::byte* data() const noexcept { return ctl_ != nullptr ? ctl_->data : nullptr; }
  std::size_t size() const noexcept { return ctl_ != nullptr ? ctl_->size : 0; }

  /// Index of the region (= size class) in buffer_pool::regions() that holds this block; this
  /// is the buffer index to give io_uring when the regions are registered as fixed buffers.
  std::uint32_t region_index() const noexcept { return ctl_ != nullptr ? ctl_->class_index : 0; }
  /// Byte offset of this block from the start of its region.
  std::size_t region_offset() const noexcept {
    return ctl_ != nullptr ? std::size_t{ctl_->index} * ctl_->size : 0;
  }

  /// Handles currently sharing the block (a snapshot; for tests and diagnostics).
  std::uint32_t use_count() const noexcept {
    return ctl_ != nullptr ? ctl_->refs.load(std::memory_order_relaxed) : 0;
  }

  /// The bytes [offset, offset + length) of the block, sharing it (no copy).
  /// A range outside the block is a bug: aborts.
  buffer_slice slice(std::size_t offset, std::size_t length) const& noexcept;
  buffer_slice slice(std::size_t offset, std::size_t length) && noexcept;

 private:
  friend class buffer_pool;
  friend class buffer_slice;

  /// Adopts a block whose count the pool has already set to 1.
  explicit buffer(detail::block_ctl* ctl) noexcept : ctl_{ctl} {}

  void retain() const noexcept {
    // relaxed: a new reference is made from an existing one, which already orders the block.
    if (ctl_ != nullptr) ctl_->refs.fetch_add(1, std::memory_order_relaxed);
  }

  detail::block_ctl* ctl_ = nullptr;
};

/// A byte range of a pooled block. Keeps the block alive; copies share it.
class buffer_slice {
 public:
  /// An empty slice: no block, no bytes.
  buffer_slice() noexcept = default;
  /// The whole of `b`.
  explicit buffer_slice(buffer b) noexcept : length_{b.size()}, buffer_{std::move(b)} {}
  buffer_slice(const buffer_slice&) noexcept = default;
  buffer_slice& operator=(const buffer_slice&) noexcept = default;
  /// A moved-from slice is empty, as a reset() one: without its block it views no bytes (the
  /// defaulted move left its length, so size() and empty() described bytes data() had no more).
  buffer_slice(buffer_slice&& other) noexcept
      : offset_{std::exchange(other.offset_, 0)},
        length_{std::exchange(other.length_, 0)},
        buffer_{std::move(other.buffer_)} {}
  buffer_slice& operator=(buffer_slice&& other) noexcept {
    buffer moved{std::move(other.buffer_)};  // self-move safe: read everything before writing
    const std::size_t offset = std::exchange(other.offset_, 0);
    const std::size_t length = std::exchange(other.length_, 0);
    buffer_.swap(moved);
    offset_ = offset;
    length_ = length;
    return *this;
  }

  /// The viewed bytes.
  std::span<std::byte> bytes() const noexcept {
    return buffer_ ? std::span<std::byte>{buffer_.data() + offset_, length_}
                   : std::span<std::byte>{};
  }
  std::byte* data() const noexcept { return buffer_ ? buffer_.data() + offset_ : nullptr; }
  std::size_t size() const noexcept { return length_; }
  bool empty() const noexcept { return length_ == 0; }
  /// True when this slice holds a block (it may still view zero bytes of it).
  explicit operator bool() const noexcept { return static_cast<bool>(buffer_); }

  /// Offset of the first viewed byte within the block.
  std::size_t offset() const noexcept { return offset_; }
  /// The block handle this slice shares.
  const buffer& owner() const noexcept { return buffer_; }

  /// The bytes [offset, offset + length) of this slice, sharing the block (no copy).
  /// A range outside this slice is a bug: aborts.
  buffer_slice subslice(std::size_t offset, std::size_t length) const& noexcept;
  buffer_slice subslice(std::size_t offset, std::size_t length) && noexcept;

  /// Drops the view; the block goes back to its pool if this was its last handle.
  void reset() noexcept {
    buffer_.reset();
    offset_ = 0;
    length_ = 0;
  }

 private:
  buffer_slice(buffer b, std::size_t offset, std::size_t length) noexcept
      : offset_{offset}, length_{length}, buffer_{std::move(b)} {}
  friend class buffer;

  std::size_t offset_ = 0;
  std::size_t length_ = 0;
  buffer buffer_;
};

namespace detail {
/// Aborts with a message naming the bad range (out of line: keeps the fast path small).
[[noreturn]] void slice_out_of_range(std::size_t offset, std::size_t length,
                                     std::size_t size) noexcept;

inline void check_range(std::size_t offset, std::size_t length, std::size_t size) noexcept {
  // Written so that offset + length cannot overflow.
  if (offset > size || length > size - offset) slice_out_of_range(offset, length, size);
}
}  // namespace detail

inline buffer_slice buffer::slice(std::size_t offset, std::size_t length) const& noexcept {
  detail::check_range(offset, length, size());
  return buffer_slice{*this, offset, length};
}
inline buffer_slice buffer::slice(std::size_t offset, std::size_t length) && noexcept {
  detail::check_range(offset, length, size());
  return buffer_slice{std::move(*this), offset, length};
}
inline buffer_slice buffer_slice::subslice(std::size_t offset,
                                           std::size_t length) const& noexcept {
  detail::check_range(offset, length, length_);
  return buffer_slice{buffer_, offset_ + offset, length};
}
inline buffer_slice buffer_slice::subslice(std::size_t offset, std::size_t length) && noexcept {
  detail::check_range(offset, length, length_);
  return buffer_slice{std::move(buffer_), offset_ + offset, length};
}

}  // namespace vessel::io
