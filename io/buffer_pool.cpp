#include "io/buffer_pool.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

namespace vessel::io {
namespace detail {

/// One size class: its region, its control records and its free list.
///
/// The free list is a Treiber stack of block indices whose links live in the blocks' own control
/// records, with the head packed as (tag << 32 | index) in one 64-bit word; every successful CAS
/// bumps the tag, so a head that was popped and pushed back between our load and our CAS (ABA)
/// fails the CAS. A wrap needs 2^32 operations inside one preempted CAS window.
/// Why not boost::lockfree::stack: it keeps its own node freelist beside the stack, so each push
/// and each pop costs two CAS loops (node allocation + link), and with fixed_sized<true> (the only
/// allocation-free mode) its 16-bit tagged indices cap a class at 65535 blocks. Here the blocks
/// are the nodes: one CAS per operation, no node storage, no limit below 2^32 - 1.
/// LIFO is deliberate too: the block released last is the one most likely still in cache.
struct size_class {
  static constexpr std::uint32_t nil = std::numeric_limits<std::uint32_t>::max();

  static std::uint64_t pack(std::uint32_t index, std::uint32_t tag) noexcept {
    return std::uint64_t{tag} << 32 | index;
  }
  static std::uint32_t index_of(std::uint64_t head) noexcept {
    return static_cast<std::uint32_t>(head);
  }
  static std::uint32_t tag_of(std::uint64_t head) noexcept {
    return static_cast<std::uint32_t>(head >> 32);
  }

  /// Takes a free block, or nullptr when none is left. `load_order` is seq_cst only for the
  /// re-check that closes the race with return_block() (see buffer_pool::try_acquire).
  block_ctl* pop(std::memory_order load_order) noexcept {
    std::uint64_t h = head.load(load_order);
    for (;;) {
      const std::uint32_t index = index_of(h);
      if (index == nil) return nullptr;
      // May read the link of a block another thread pops meanwhile; the tag then fails the CAS.
      const std::uint32_t next = blocks[index].next_free.load(std::memory_order_relaxed);
      // acquire (also on failure, since the loop reads the new head's link): see the releaser's
      // writes to the block and to its link.
      if (head.compare_exchange_weak(h, pack(next, tag_of(h) + 1), std::memory_order_acquire,
                                     std::memory_order_acquire)) {
        return &blocks[index];
      }
    }
  }

  /// Puts a block back. seq_cst so that return_block()'s later load of `waiting` and
  /// try_acquire()'s store of it plus re-check can't both miss each other.
  void push(block_ctl* block) noexcept {
    std::uint64_t h = head.load(std::memory_order_relaxed);
    for (;;) {
      block->next_free.store(index_of(h), std::memory_order_relaxed);
      if (head.compare_exchange_weak(h, pack(block->index, tag_of(h) + 1),
                                     std::memory_order_seq_cst, std::memory_order_relaxed)) {
        return;
      }
    }
  }

  // Written by every acquire and release: each group on its own cache line.
  alignas(64) std::atomic<std::uint64_t> head{pack(nil, 0)};
  // No `released` counter: it is acquired - in_use, and one locked add less per release is ~8 ns
  // on our VMs (bench_io_buffer_pool).
  alignas(64) std::atomic<std::uint64_t> acquired{0};
  std::atomic<std::uint64_t> exhausted{0};
  std::atomic<std::uint32_t> in_use{0};
  std::atomic<std::uint32_t> high_water{0};
  std::atomic<bool> waiting{false};  ///< a try_acquire found the class empty since the last notice

  // Read-only after construction.
  alignas(64) buffer_pool* pool = nullptr;
  std::size_t class_index = 0;
  std::size_t block_size = 0;
  std::uint32_t block_count = 0;
  std::byte* region = nullptr;
  std::size_t mapped_bytes = 0;
  std::unique_ptr<block_ctl[]> blocks;
  // borrowed_memory only: per block, lend_free / lend_out / lend_back. A returned block goes
  // nowhere: its lender, waiting on this word, frees the slot.
  std::unique_ptr<std::atomic<std::uint32_t>[]> lend_states;
};

constexpr std::uint32_t lend_free = 0;
constexpr std::uint32_t lend_out = 1;
constexpr std::uint32_t lend_back = 2;

void return_block(block_ctl* ctl) noexcept {
  size_class& cls = *ctl->owner;
  if (cls.lend_states) {
    // release: the holders' last reads of the memory happen-before the lender reuses it.
    std::atomic<std::uint32_t>& state = cls.lend_states[ctl->index];
    state.store(lend_back, std::memory_order_release);
    state.notify_all();
    return;
  }
  // Before the push, so that in_use never counts a block that is already back on the list (the
  // high-water mark then never exceeds block_count).
  cls.in_use.fetch_sub(1, std::memory_order_relaxed);
  cls.push(ctl);
  if (cls.waiting.load(std::memory_order_seq_cst) &&
      cls.waiting.exchange(false, std::memory_order_seq_cst)) {
    cls.pool->notify_available(cls.class_index);
  }
}

/// A private anonymous region of `bytes` (a multiple of the page size). One of 2 MiB or more, with
/// `huge`, starts on a 2 MiB boundary and is advised for transparent huge pages (best effort: a
/// kernel without THP leaves it in small pages). Throws std::system_error when mmap fails.
void* map_region(std::size_t bytes, bool populate, bool huge) {
  constexpr std::size_t huge_page = std::size_t{2} << 20;
  const auto fail = [&] {
    throw std::system_error(errno, std::system_category(),
                            "buffer_pool: mmap of " + std::to_string(bytes) + " bytes");
  };
  if (!huge || bytes < huge_page) {
    // MAP_POPULATE pre-faults a private writable mapping with write faults, so every page is
    // backed here, once, rather than on the first receive into it.
    void* region = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
    if (region == MAP_FAILED) fail();
    return region;
  }
  // Over-map by one huge page, keep the aligned part: THP only backs aligned 2 MiB ranges.
  void* raw = ::mmap(nullptr, bytes + huge_page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) fail();
  auto* base = static_cast<std::byte*>(raw);
  const auto addr = reinterpret_cast<std::uintptr_t>(base);
  auto* region = reinterpret_cast<std::byte*>((addr + huge_page - 1) & ~(huge_page - 1));
  const std::size_t head = static_cast<std::size_t>(region - base);
  if (head != 0) ::munmap(base, head);
  if (const std::size_t tail = huge_page - head; tail != 0) ::munmap(region + bytes, tail);
  (void)::madvise(region, bytes, MADV_HUGEPAGE);
  // After the advice, so that the pre-fault takes huge pages too. A kernel before 5.14 has no
  // MADV_POPULATE_WRITE: write to each page instead.
  if (populate && ::madvise(region, bytes, MADV_POPULATE_WRITE) != 0) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    volatile std::byte* const touch = region;
    for (std::size_t at = 0; at < bytes; at += page) touch[at] = std::byte{0};
  }
  return region;
}

void slice_out_of_range(std::size_t offset, std::size_t length, std::size_t size) noexcept {
  std::fprintf(stderr, "vessel::io: slice [%zu, +%zu) is outside a buffer of %zu bytes; aborting\n",
               offset, length, size);
  std::abort();
}

}  // namespace detail

buffer_pool_config buffer_pool_config::defaults() {
  return buffer_pool_config{{{4096, 1024}, {65536, 256}, {std::size_t{1} << 20, 64}}, true};
}

namespace {

void validate(const buffer_pool_config& config) {
  if (config.classes.empty()) throw std::invalid_argument("buffer_pool: no size class");
  std::vector<std::size_t> sizes;
  for (const size_class_config& c : config.classes) {
    const std::string what = "buffer_pool: size class " + std::to_string(c.block_size) + " x " +
                             std::to_string(c.block_count) + ": ";
    if (c.block_size == 0 || c.block_size % 64 != 0) {
      throw std::invalid_argument(what + "block size must be a positive multiple of 64");
    }
    if (c.block_count == 0 || c.block_count == detail::size_class::nil) {
      throw std::invalid_argument(what + "block count must be in [1, 2^32 - 2]");
    }
    if (c.block_size > std::numeric_limits<std::size_t>::max() / 2 / c.block_count) {
      throw std::invalid_argument(what + "region size overflows");
    }
    sizes.push_back(c.block_size);
  }
  std::sort(sizes.begin(), sizes.end());
  if (std::adjacent_find(sizes.begin(), sizes.end()) != sizes.end()) {
    throw std::invalid_argument("buffer_pool: two size classes share a block size");
  }
}

}  // namespace

buffer_pool::buffer_pool(const buffer_pool_config& config) {
  validate(config);
  std::vector<size_class_config> sorted = config.classes;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.block_size < b.block_size; });

  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

  classes_.reserve(sorted.size());
  regions_.reserve(sorted.size());
  try {
    for (const size_class_config& c : sorted) {
      const std::size_t bytes = c.block_size * c.block_count;
      const std::size_t mapped = (bytes + page - 1) / page * page;
      auto owned = std::make_unique<detail::size_class>();
      void* region = detail::map_region(mapped, config.populate, config.huge_pages);
      // Owned by classes_ from here on, so that the catch below unmaps it whatever throws next.
      detail::size_class* cls = owned.get();
      cls->region = static_cast<std::byte*>(region);
      cls->mapped_bytes = mapped;
      classes_.push_back(std::move(owned));
      cls->pool = this;
      cls->class_index = classes_.size() - 1;
      cls->block_size = c.block_size;
      cls->block_count = c.block_count;
      cls->blocks = std::make_unique<detail::block_ctl[]>(c.block_count);
      // Link block i to i + 1, so that the first acquires walk the region in address order.
      for (std::uint32_t i = 0; i < c.block_count; ++i) {
        detail::block_ctl& b = cls->blocks[i];
        b.index = i;
        b.class_index = static_cast<std::uint32_t>(cls->class_index);
        b.data = cls->region + std::size_t{i} * c.block_size;
        b.size = c.block_size;
        b.owner = cls;
        b.next_free.store(i + 1 < c.block_count ? i + 1 : detail::size_class::nil,
                          std::memory_order_relaxed);
      }
      cls->head.store(detail::size_class::pack(0, 0), std::memory_order_relaxed);

      regions_.push_back(::iovec{region, bytes});
      memory_bytes_ +=
          mapped + sizeof(detail::block_ctl) * c.block_count + sizeof(detail::size_class);
    }
  } catch (...) {
    for (auto& cls : classes_) ::munmap(cls->region, cls->mapped_bytes);
    throw;
  }
}

buffer_pool::~buffer_pool() {
  // A live handle would return its block into freed memory later, which corrupts whatever lives
  // there by then: fail loudly at the cause instead.
  for (const auto& cls : classes_) {
    const std::uint32_t in_use = cls->in_use.load(std::memory_order_acquire);
    if (in_use != 0) {
      std::fprintf(stderr,
                   "vessel::io::buffer_pool destroyed while %u buffer(s) of its %zu-byte class are "
                   "still in use: the pool must outlive its buffers; aborting\n",
                   in_use, cls->block_size);
      std::abort();
    }
  }
  for (const auto& cls : classes_) ::munmap(cls->region, cls->mapped_bytes);
}

std::optional<std::size_t> buffer_pool::class_for(std::size_t min_bytes) const noexcept {
  // A handful of classes, sorted: a linear scan beats a binary search here.
  for (std::size_t i = 0; i < classes_.size(); ++i) {
    if (classes_[i]->block_size >= min_bytes) return i;
  }
  return std::nullopt;
}

buffer buffer_pool::try_acquire(std::size_t min_bytes) noexcept {
  const std::optional<std::size_t> index = class_for(min_bytes);
  if (!index) return {};
  detail::size_class& cls = *classes_[*index];

  detail::block_ctl* block = cls.pop(std::memory_order_acquire);
  if (block == nullptr) {
    // Arm the callback, then look again: a block returned before the flag was visible to its
    // releaser is visible to this seq_cst re-check (both sides are seq_cst), so no return is
    // missed by both. A block found here is simply taken; the armed flag may then fire once
    // spuriously, which the callback contract allows.
    cls.waiting.store(true, std::memory_order_seq_cst);
    block = cls.pop(std::memory_order_seq_cst);
    if (block == nullptr) {
      cls.exhausted.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
  }
  block->refs.store(1, std::memory_order_relaxed);
  cls.acquired.fetch_add(1, std::memory_order_relaxed);
  const std::uint32_t used = cls.in_use.fetch_add(1, std::memory_order_relaxed) + 1;
  std::uint32_t high = cls.high_water.load(std::memory_order_relaxed);
  while (used > high &&
         !cls.high_water.compare_exchange_weak(high, used, std::memory_order_relaxed)) {
  }
  return buffer{block};
}

std::size_t buffer_pool::block_size(std::size_t class_index) const noexcept {
  return class_index < classes_.size() ? classes_[class_index]->block_size : 0;
}

std::size_t buffer_pool::max_block_size() const noexcept {
  return classes_.back()->block_size;
}

size_class_stats buffer_pool::stats(std::size_t class_index) const noexcept {
  if (class_index >= classes_.size()) return {};
  const detail::size_class& cls = *classes_[class_index];
  size_class_stats s;
  s.block_size = cls.block_size;
  s.block_count = cls.block_count;
  // Exact when no acquire or release is in flight; min() keeps a racing snapshot from wrapping.
  s.in_use = cls.in_use.load(std::memory_order_relaxed);
  s.acquired = cls.acquired.load(std::memory_order_relaxed);
  s.released = s.acquired - std::min<std::uint64_t>(s.acquired, s.in_use);
  s.exhausted = cls.exhausted.load(std::memory_order_relaxed);
  s.high_water = cls.high_water.load(std::memory_order_relaxed);
  return s;
}

void buffer_pool::set_available_callback(available_callback callback) {
  const std::lock_guard lock{callback_mutex_};
  callback_ = std::move(callback);
}

void buffer_pool::notify_available(std::size_t class_index) noexcept {
  const std::lock_guard lock{callback_mutex_};
  if (callback_) callback_(class_index);
}

// -- borrowed_memory

borrowed_memory::borrowed_memory(std::uint32_t slots)
    : slots_{std::make_unique<detail::size_class>()} {
  if (slots == 0 || slots == detail::size_class::nil) {
    throw std::invalid_argument("borrowed_memory: slots must be in [1, 2^32 - 2]");
  }
  detail::size_class& cls = *slots_;
  cls.block_count = slots;
  cls.blocks = std::make_unique<detail::block_ctl[]>(slots);
  cls.lend_states = std::make_unique<std::atomic<std::uint32_t>[]>(slots);
  for (std::uint32_t i = 0; i < slots; ++i) {
    cls.blocks[i].index = i;
    cls.blocks[i].owner = &cls;
    cls.lend_states[i].store(detail::lend_free, std::memory_order_relaxed);
  }
}

borrowed_memory::~borrowed_memory() {
  for (std::uint32_t i = 0; i < slots_->block_count; ++i) {
    if (slots_->lend_states[i].load(std::memory_order_acquire) == detail::lend_out) {
      std::fprintf(stderr,
                   "vessel::io::borrowed_memory destroyed while a loan is out: its handles would "
                   "outlive it; aborting\n");
      std::abort();
    }
  }
}

borrowed_memory::loan borrowed_memory::try_lend(std::span<std::byte> memory) noexcept {
  detail::size_class& cls = *slots_;
  for (std::uint32_t i = 0; i < cls.block_count; ++i) {
    std::uint32_t expected = detail::lend_free;
    if (!cls.lend_states[i].compare_exchange_strong(
            expected, detail::lend_out, std::memory_order_acquire, std::memory_order_relaxed)) {
      continue;
    }
    detail::block_ctl& b = cls.blocks[i];
    b.data = memory.data();
    b.size = memory.size();
    b.refs.store(1, std::memory_order_relaxed);
    return loan{buffer_pool::adopt(&b), i};
  }
  return {};
}

void borrowed_memory::wait_returned(std::uint32_t slot) noexcept {
  std::atomic<std::uint32_t>& state = slots_->lend_states[slot];
  for (std::uint32_t s = state.load(std::memory_order_acquire); s == detail::lend_out;
       s = state.load(std::memory_order_acquire)) {
    state.wait(s, std::memory_order_acquire);
  }
  state.store(detail::lend_free, std::memory_order_release);
}

bool borrowed_memory::returned(std::uint32_t slot) const noexcept {
  return slots_->lend_states[slot].load(std::memory_order_acquire) != detail::lend_out;
}

}  // namespace vessel::io
