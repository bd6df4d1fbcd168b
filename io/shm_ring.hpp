#pragma once
// The layout of one direction of a shared-memory link, and the single-producer/single-consumer
// byte rings inside it.
//
// Each side creates the segment it SENDS on and hands it to the peer (io/shm_connector.hpp):
//
//   offset 0     segment_header   written once by the creator, validated by the peer
//   offset 64    ring_control     head/tail words and wake-up flags, one cache line per writer
//   offset 4096  frame ring       records (see shm_transport.cpp), capacity a power of two
//   after it     payload area     large payloads, written once by the sender, read in place
//
// A payload the sender lends instead (shm_transport.cpp, "lent records") is not in the segment at
// all: the record names its address in the sender's memory, and the receiver reads it from there
// in one copy (io/cross_memory.hpp) by the pid and token the segment header names.
//
// Why a byte ring of our own rather than boost::lockfree::spsc_queue: records have variable size
// (a 24-byte ack and a 4 KiB inline payload share one ring without wasting slots), and the reader
// needs the record's bytes in place (no pop-by-copy) so that a payload view can point into the
// ring. Positions are 64-bit byte counts that never wrap (2^64 bytes is centuries at 10 GB/s), so
// full and empty are told apart without a spare slot.
//
// Cross-process atomics: std::atomic<std::uint64_t> is lock-free here (static_assert below), so
// it is a plain word in memory and works the same when the two sides map it at different
// addresses. Nothing in a segment is a pointer.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vessel::io::shm {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "shared-memory rings need address-free (lock-free) atomics");

inline constexpr std::uint64_t segment_magic = 0x5653'484d'5631'0000ull;  // "VSHMV1\0\0"
// 2: line-aligned records, polled by word0. 3: the creator's process token, lent records.
inline constexpr std::uint32_t layout_version = 3;
inline constexpr std::size_t cache_line = 64;
inline constexpr std::size_t ring_offset = 4096;

/// Offset 0 of every segment: its geometry, written once by the creator before the hand-over.
struct segment_header {
  std::uint64_t magic = 0;
  std::uint32_t version = 0;
  std::uint32_t creator_pid = 0;  ///< who lends payloads on this direction (cross_memory.hpp)
  std::uint64_t ring_bytes = 0;   ///< frame ring capacity (power of two)
  std::uint64_t area_bytes = 0;   ///< payload area capacity (power of two)
  std::uint64_t creator_token_address = 0;  ///< where the creator's process_token lies
  std::uint64_t creator_token[2] = {};      ///< its value
};

/// The words both sides share for one direction. Each cache line is written by one side only,
/// so the producer's stores never invalidate the line the consumer polls and vice versa.
struct ring_control {
  /// Producer: frame-ring bytes published. shm_transport's receiver polls the records' own first
  /// words instead (one cross-core miss less per frame); the ring test reads it.
  alignas(cache_line) std::atomic<std::uint64_t> head{0};
  std::atomic<std::uint64_t> area_head{0};                 ///< producer: area bytes published
  alignas(cache_line) std::atomic<std::uint64_t> tail{0};  ///< consumer: frame-ring bytes consumed
  std::atomic<std::uint64_t> area_tail{0};                 ///< consumer: area bytes released
  /// Consumer: 1 while it sleeps on its eventfd; the producer then writes the eventfd.
  alignas(cache_line) std::atomic<std::uint32_t> consumer_sleeping{0};
  /// Producer: 1 while a send was refused for lack of room; the consumer then wakes it.
  alignas(cache_line) std::atomic<std::uint32_t> producer_waiting{0};
  /// Producer: 1 once it closed in order (so EOF on the socket means "closed", not "died").
  alignas(cache_line) std::atomic<std::uint32_t> producer_closed{0};
  /// Consumer: 1 once it has read the producer's token from the producer's memory (so it may be
  /// lent payloads: shm_transport.cpp, "lent records"), 0 when it may not or will not.
  alignas(cache_line) std::atomic<std::uint32_t> consumer_pulls{0};
  /// Producer: 1 while it writes the back of a lent payload into the consumer's memory when
  /// offered (shm_transport.cpp, "Lent records"); 0 once such a write failed.
  alignas(cache_line) std::atomic<std::uint32_t> producer_pushes{0};
  /// Producer: every lent record that ends at or before this ring position was withdrawn (its
  /// block let go before the consumer had consumed it: the producer's end came first), so its
  /// bytes may be another payload's by now. The consumer checks it after each read.
  std::atomic<std::uint64_t> loans_withdrawn{0};
};

static_assert(sizeof(segment_header) <= cache_line);
static_assert(cache_line + sizeof(ring_control) <= ring_offset);

/// Segment bytes for a direction with these capacities.
constexpr std::size_t segment_bytes(std::size_t ring_bytes, std::size_t area_bytes) noexcept {
  return ring_offset + ring_bytes + area_bytes;
}

/// The producer's view of one byte ring. Reservations stay private until publish(), so a frame
/// whose second part (ring record after area payload) does not fit is rolled back untouched.
class ring_producer {
 public:
  ring_producer() noexcept = default;
  ring_producer(std::atomic<std::uint64_t>* head, std::atomic<std::uint64_t>* tail,
                std::byte* data, std::uint64_t capacity) noexcept
      : head_{head}, tail_{tail}, data_{data}, capacity_{capacity}, mask_{capacity - 1},
        reserved_{head->load(std::memory_order_relaxed)}, published_{reserved_},
        cached_tail_{tail->load(std::memory_order_acquire)} {}

  /// Reserves `n` contiguous bytes (n <= capacity). When the ring's end is too short, the bytes up
  /// to the end are skipped (`skipped` says how many; the frame ring marks them with a pad record)
  /// and the reservation starts at offset 0. Null when the consumer has not freed enough yet.
  std::byte* reserve(std::uint64_t n, std::uint64_t& pos, std::uint64_t& skipped) noexcept {
    const std::uint64_t offset = reserved_ & mask_;
    skipped = offset + n > capacity_ ? capacity_ - offset : 0;
    const std::uint64_t end = reserved_ + skipped + n;
    if (end - cached_tail_ > capacity_) {
      // acquire: the consumer's reads of the bytes it freed happen-before we overwrite them.
      cached_tail_ = tail_->load(std::memory_order_acquire);
      if (end - cached_tail_ > capacity_) return nullptr;
    }
    pos = reserved_ + skipped;
    reserved_ = end;
    return data_ + (pos & mask_);
  }

  /// The address of ring position `pos` (for the pad marker of skipped bytes).
  std::byte* at(std::uint64_t pos) const noexcept { return data_ + (pos & mask_); }

  /// Forgets reservations made since the last publish().
  void rollback() noexcept { reserved_ = published_; }

  /// Makes every reservation visible to the consumer; release: the bytes written into them
  /// happen-before the consumer's acquire load of the head.
  void publish() noexcept {
    published_ = reserved_;
    head_->store(published_, std::memory_order_release);
  }

  /// Bytes published and not yet freed by the consumer.
  std::uint64_t in_use() const noexcept {
    return published_ - tail_->load(std::memory_order_relaxed);
  }
  std::uint64_t capacity() const noexcept { return capacity_; }

 private:
  std::atomic<std::uint64_t>* head_ = nullptr;
  std::atomic<std::uint64_t>* tail_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t capacity_ = 0;
  std::uint64_t mask_ = 0;
  std::uint64_t reserved_ = 0;
  std::uint64_t published_ = 0;
  std::uint64_t cached_tail_ = 0;
};

/// The consumer's view of one byte ring. It writes into the ring too: a transport may mark what
/// it consumed (shm_transport zeroes the first word of each line) before consume_to().
class ring_consumer {
 public:
  ring_consumer() noexcept = default;
  ring_consumer(std::atomic<std::uint64_t>* head, std::atomic<std::uint64_t>* tail,
                std::byte* data, std::uint64_t capacity) noexcept
      : head_{head}, tail_{tail}, data_{data}, capacity_{capacity}, mask_{capacity - 1},
        read_{tail->load(std::memory_order_relaxed)}, cached_head_{read_} {}

  /// Bytes published and not consumed. Loads the shared head only when the cached one is used
  /// up, so a burst costs one cross-core miss, not one per record.
  std::uint64_t readable() noexcept {
    if (cached_head_ == read_) cached_head_ = head_->load(std::memory_order_acquire);
    return cached_head_ - read_;
  }
  /// Reloads the shared head (acquire) and returns the readable bytes.
  std::uint64_t refresh() noexcept {
    cached_head_ = head_->load(std::memory_order_acquire);
    return cached_head_ - read_;
  }
  /// The published head as last loaded.
  std::uint64_t cached_head() const noexcept { return cached_head_; }

  /// The next unread position, and its address.
  std::uint64_t position() const noexcept { return read_; }
  std::byte* at(std::uint64_t pos) const noexcept { return data_ + (pos & mask_); }
  /// Bytes from `pos` to the ring's physical end.
  std::uint64_t contiguous(std::uint64_t pos) const noexcept { return capacity_ - (pos & mask_); }

  /// Frees everything before `pos` to the producer; release: our reads of those bytes
  /// happen-before the producer may reuse them.
  void consume_to(std::uint64_t pos) noexcept {
    read_ = pos;
    tail_->store(pos, std::memory_order_release);
  }
  std::uint64_t capacity() const noexcept { return capacity_; }

 private:
  std::atomic<std::uint64_t>* head_ = nullptr;
  std::atomic<std::uint64_t>* tail_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t capacity_ = 0;
  std::uint64_t mask_ = 0;
  std::uint64_t read_ = 0;
  std::uint64_t cached_head_ = 0;
};

}  // namespace vessel::io::shm
