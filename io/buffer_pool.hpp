#pragma once
// Bounded pools of fixed-size blocks: the memory every data path of vessel::io moves bytes in.
//
// Why pools: a first touch of fresh memory costs page faults (~225 ms for 64 MiB on our 2-core
// VMs, against ~4 ms to copy into touched memory; DESIGN.md), and glibc serves large mallocs
// with fresh mmaps. So each size class is one contiguous, page-aligned mapping, pre-faulted once
// at construction, and carved into fixed-size blocks that circulate forever. The regions can be
// registered with io_uring (io_uring_register_buffers) as they are: see regions().
//
// Backpressure: a class never grows. try_acquire() on an exhausted class returns an empty
// handle, counts an exhaustion event, and arms that class's available-callback, which fires once
// from the thread that next returns a block to it.

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "io/buffer.hpp"

namespace vessel::io {

/// One size class: `block_count` blocks of `block_size` bytes each.
struct size_class_config {
  std::size_t block_size = 0;     ///< bytes per block; > 0, a multiple of 64 (cache line)
  std::uint32_t block_count = 0;  ///< blocks in the class; > 0, < 2^32 - 1
};

/// What a buffer_pool holds. Memory used is bounded by buffer_pool::memory_bytes().
struct buffer_pool_config {
  /// Size classes, in any order; block sizes must be distinct.
  std::vector<size_class_config> classes;
  /// Pre-fault the regions at construction (MAP_POPULATE), so no receive ever pays a page fault.
  bool populate = true;
  /// Back regions of 2 MiB or more with transparent huge pages where the kernel allows it
  /// (MADV_HUGEPAGE; /sys/kernel/mm/transparent_hugepage/enabled at `madvise` or `always`). A
  /// region not pre-faulted then pays one fault per 2 MiB instead of 512: on the PVM guests we
  /// run on, a first touch of a 4 KiB page costs ~11 µs, and a receiver that fell behind a 64 KiB
  /// stream, queueing into blocks it had never touched, spent its time in page faults (64 MiB:
  /// 180 ms in 4 KiB pages, 4 ms in huge pages). Memory is then touched in 2 MiB steps.
  bool huge_pages = true;

  /// 4 KiB × 1024 + 64 KiB × 256 + 1 MiB × 64 = 84 MiB of payload: small control frames, typical
  /// fragments, and a few whole large messages in flight.
  static buffer_pool_config defaults();
};

/// Counters of one size class (a snapshot; each field is read separately, relaxed).
struct size_class_stats {
  std::size_t block_size = 0;
  std::uint32_t block_count = 0;
  std::uint64_t acquired = 0;    ///< successful try_acquire() calls
  std::uint64_t released = 0;    ///< blocks returned (last handle dropped): acquired - in_use
  std::uint64_t exhausted = 0;   ///< try_acquire() calls that found the class empty
  std::uint32_t in_use = 0;      ///< blocks handed out and not yet returned
  std::uint32_t high_water = 0;  ///< the most blocks in use at once
};

/// Fixed size classes of pooled, reference-counted buffers.
///
/// Thread safety: try_acquire(), stats() and handle operations may be called from any thread.
/// The pool must outlive every buffer it handed out: destroying it with blocks in use aborts.
/// Neither acquiring nor releasing allocates or takes a lock.
class borrowed_memory;

class buffer_pool {
 public:
  /// Called with a class index when that class may have free blocks again, after a try_acquire()
  /// on it found it empty. Runs on the thread that returned the block, under the pool's callback
  /// lock: keep it short (e.g. wake a reactor through an eventfd) and do not call
  /// set_available_callback() from it; try_acquire() is fine. It may be spurious: retry.
  using available_callback = std::function<void(std::size_t class_index)>;

  /// Maps and (by default) pre-faults every class.
  /// Throws std::invalid_argument for a bad config, std::system_error when mmap fails.
  explicit buffer_pool(const buffer_pool_config& config);
  ~buffer_pool();

  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;
  buffer_pool(buffer_pool&&) = delete;  // handles point into the pool
  buffer_pool& operator=(buffer_pool&&) = delete;

  /// A block of the smallest class whose blocks hold `min_bytes`, or an empty handle when that
  /// class is exhausted (backpressure: wait for the available-callback) or when no class is large
  /// enough (check max_block_size(); not counted as exhaustion). Never falls through to a larger
  /// class: small messages must not drain the blocks reserved for large ones.
  buffer try_acquire(std::size_t min_bytes) noexcept;

  /// The class try_acquire(min_bytes) would use, or nullopt when none is large enough.
  std::optional<std::size_t> class_for(std::size_t min_bytes) const noexcept;

  /// Number of size classes (= number of regions).
  std::size_t class_count() const noexcept { return classes_.size(); }
  /// Block size of class `class_index`, classes sorted by ascending block size.
  std::size_t block_size(std::size_t class_index) const noexcept;
  /// Largest block any class holds.
  std::size_t max_block_size() const noexcept;
  /// Counters of class `class_index`.
  size_class_stats stats(std::size_t class_index) const noexcept;

  /// One iovec per class, in class order: the contiguous, page-aligned payload region of that
  /// class (block i at offset i × block_size). Ready for io_uring_register_buffers.
  std::span<const ::iovec> regions() const noexcept { return regions_; }
  /// Bytes mapped for payload (page-rounded), plus the per-block control records: the bound on
  /// what this pool ever uses.
  std::size_t memory_bytes() const noexcept { return memory_bytes_; }

  /// Replaces the callback (an empty function removes it). Thread-safe.
  void set_available_callback(available_callback callback);

 private:
  friend void detail::return_block(detail::block_ctl* ctl) noexcept;
  friend class borrowed_memory;

  /// A handle adopting `ctl`, whose count is already 1 (buffer's constructor is ours only).
  static buffer adopt(detail::block_ctl* ctl) noexcept { return buffer{ctl}; }
  void notify_available(std::size_t class_index) noexcept;

  std::vector<std::unique_ptr<detail::size_class>> classes_;
  std::vector<::iovec> regions_;
  std::size_t memory_bytes_ = 0;

  std::mutex callback_mutex_;  // taken only when an exhausted class gets a block back
  available_callback callback_;
};

/// Memory that is not a pool's, lent out as buffers so that a large payload is sent without a
/// copy. The lender hands the handle to whoever sends it (the mesh keeps slices of it until the
/// peer acks every fragment) and then calls wait_returned(): the caller may reuse or free its
/// memory only after that, when no handle to it is left anywhere. A copy into a pool block costs a
/// pass over the bytes (~100 us per MiB here, a quarter of a 1 MiB send over shm); this costs a
/// wait for the last ack instead.
///
/// Thread safety: try_lend() and wait_returned() from any thread; handles as any buffer.
/// Must outlive every handle it lent: destroying it with one out aborts.
class borrowed_memory {
 public:
  /// One slot per loan that may be out at once; `slots` in [1, 2^32 - 2].
  explicit borrowed_memory(std::uint32_t slots);
  ~borrowed_memory();
  borrowed_memory(const borrowed_memory&) = delete;
  borrowed_memory& operator=(const borrowed_memory&) = delete;

  /// A loan: the handle over the memory, and the slot wait_returned() takes.
  struct loan {
    buffer handle;  ///< empty when every slot is out
    std::uint32_t slot = 0;
  };
  /// Lends `memory` (not copied: the handle's bytes are `memory`). Empty when every slot is out.
  loan try_lend(std::span<std::byte> memory) noexcept;
  /// Blocks until every handle of the loan in `slot` is gone, then frees the slot. Exactly once
  /// per successful try_lend(), after the lender dropped its own handle.
  void wait_returned(std::uint32_t slot) noexcept;
  /// True when every handle of the loan in `slot` is gone (wait_returned() would not block).
  bool returned(std::uint32_t slot) const noexcept;

 private:
  friend void detail::return_block(detail::block_ctl* ctl) noexcept;

  std::unique_ptr<detail::size_class> slots_;
};

}  // namespace vessel::io
