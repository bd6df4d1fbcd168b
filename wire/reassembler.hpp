#pragma once
// Reassembles the fragments of one message, in any order, in place into one caller-provided buffer
// (a pooled buffer of total_len bytes: DESIGN.md, "touch memory once"). Runs on the reactor thread
// that owns the link; one reassembler per message in flight, reused from message to message.
//
// Untrusted input: every fragment is checked against the layout fragmenter.hpp produces (all but
// the last fragment hold the same number of bytes s, fragment i starts at i*s, the last one ends at
// total_len), so that no fragment can write over bytes another fragment owns, and a fragment that
// fails a check writes nothing.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "wire/errc.hpp"
#include "wire/result.hpp"

namespace vessel::wire {

/// Bounds on what a peer may ask a reassembler to hold.
struct reassembly_limits {
  /// Largest totalLen accepted (1 GiB): the destination comes from a pool, and this is what one
  /// message may take from it.
  std::uint64_t max_message_bytes = std::uint64_t{1} << 30;
  /// Largest fragmentCount accepted: bounds the bitmap at 8 KiB per message in flight
  /// (64 Ki fragments of 16 KiB already make the 1 GiB limit).
  std::uint32_t max_fragments = std::uint32_t{1} << 16;
};

/// What accept() did with a well-formed fragment.
enum class fragment_status {
  accepted,   ///< new: its bytes were copied into the destination.
  duplicate,  ///< already received with the same layout: dropped, counted.
};

/// A run of missing fragment indices [first, first + count).
struct fragment_gap {
  std::uint32_t first = 0;
  std::uint32_t count = 0;

  friend constexpr bool operator==(const fragment_gap&, const fragment_gap&) = default;
};

/// Totals over the reassembler's life, across messages; for link counters and logs.
struct reassembly_counters {
  std::uint64_t messages = 0;            ///< begin() calls that succeeded.
  std::uint64_t completed = 0;           ///< messages whose last missing fragment arrived.
  std::uint64_t fragments = 0;           ///< fragments accepted as new.
  std::uint64_t bytes = 0;               ///< payload bytes copied into destinations.
  std::uint64_t in_place = 0;            ///< fragments found in place (destination_of): no copy.
  std::uint64_t duplicates = 0;          ///< exact duplicates dropped.
  std::uint64_t rejected = 0;            ///< begin() or accept() calls that returned an error.
  std::uint64_t bitmap_allocations = 0;  ///< times begin() had to grow the bookkeeping bitmap.
};

/// Writes a message's body by folding each arriving byte run into the destination instead of
/// copying it there: `apply(ctx, dst, operand, arriving, n)` sets dst[0, n) from operand[0, n)
/// and arriving[0, n) (a receiver that reduces a chunk as it lands: dst = operand op arriving,
/// with no pass through a buffer in between). `operand` is as long as the body and its byte i
/// pairs with body byte i; it is only read. Runs are cut at fragment boundaries, so their
/// offsets in the body are those of the fragments less the head.
struct body_combiner {
  using fn = void (*)(const void* ctx, std::byte* dst, const std::byte* operand,
                      const std::byte* arriving, std::size_t n) noexcept;
  fn apply = nullptr;
  const void* ctx = nullptr;
  const std::byte* operand = nullptr;
  explicit operator bool() const noexcept { return apply != nullptr; }
};

/// Where a fragment's bytes belong in a two-part destination: the part that falls in the head and
/// the part in the body (a first fragment holds both when the head is a few header bytes).
struct fragment_place {
  std::span<std::byte> head;
  std::span<std::byte> body;
  bool empty() const noexcept { return head.empty() && body.empty(); }
  std::size_t size() const noexcept { return head.size() + body.size(); }
};

/// Reassembles one message at a time into a caller-owned buffer.
class reassembler {
 public:
  explicit reassembler(reassembly_limits limits = {}) noexcept : limits_(limits) {}

  reassembler(const reassembler&) = delete;
  reassembler& operator=(const reassembler&) = delete;
  reassembler(reassembler&&) noexcept = default;
  reassembler& operator=(reassembler&&) noexcept = default;
  ~reassembler() = default;

  /// Starts message `message_id` of `total_len` bytes in `fragment_count` fragments, written into
  /// `dst` (at least total_len bytes, not touched outside [0, total_len)); abandons the message in
  /// progress, if any. Fails with message_too_large or too_many_fragments beyond the limits,
  /// bad_field if fragment_count is 0 or exceeds max(total_len, 1) (every fragment but an empty
  /// message's holds a byte), buffer_too_small if dst is shorter than total_len; then nothing
  /// changes. Allocates only when the bitmap must grow beyond what an earlier message used.
  result<void> begin(std::uint64_t message_id, std::uint64_t total_len,
                     std::uint32_t fragment_count, std::span<std::byte> dst);

  /// begin() into a destination in two parts: the message's first head.size() bytes (or all of
  /// it, if shorter) go to `head`, the rest to `body` (a receive that keeps a small header apart
  /// from the bytes it lands in the app's buffer). buffer_too_small unless both together hold
  /// total_len.
  result<void> begin(std::uint64_t message_id, std::uint64_t total_len,
                     std::uint32_t fragment_count, std::span<std::byte> head,
                     std::span<std::byte> body);
  /// As above, the body's bytes combined into it by `combine` rather than copied (the head's
  /// are copied). destination_of then names no place in the body (a transport cannot receive
  /// into memory that must be computed), and retarget refuses the message.
  result<void> begin(std::uint64_t message_id, std::uint64_t total_len,
                     std::uint32_t fragment_count, std::span<std::byte> head,
                     std::span<std::byte> body, body_combiner combine);

  /// Copies fragment `fragment_index` (its payload, at byte `offset`) into the destination.
  /// `fragment_count` and `total_len` are the fragment header's, checked against begin()'s.
  /// Errors, after which nothing was written: fragment_mismatch if no message is in progress, or
  /// count/total differ from begin()'s, or the offset/length break the layout (including a repeat
  /// of a received index with other bytes); fragment_out_of_range if index >= count or the bytes
  /// end past total_len.
  result<fragment_status> accept(std::uint32_t fragment_index, std::uint32_t fragment_count,
                                 std::uint64_t offset, std::uint64_t total_len,
                                 std::span<const std::byte> payload);

  /// Where accept() would copy fragment `fragment_index` of `length` bytes (checked as accept()
  /// checks it, without accepting it), so that a transport can receive its payload there
  /// directly; accept() then finds the bytes in place and copies nothing. Empty when accept()
  /// would refuse the fragment, when it is a duplicate, or when it straddles the two parts of a
  /// two-part destination.
  std::span<std::byte> destination_of(std::uint32_t fragment_index, std::uint32_t fragment_count,
                                      std::uint64_t offset, std::uint64_t total_len,
                                      std::uint64_t length);

  /// As destination_of, for a fragment that may straddle the two parts of the destination: its
  /// bytes in the head, then those in the body. Empty where destination_of is, except that a
  /// straddling fragment has a place (a combined body still has none). A transport that received
  /// the fragment there hands it over with accept_placed().
  fragment_place placement_of(std::uint32_t fragment_index, std::uint32_t fragment_count,
                              std::uint64_t offset, std::uint64_t total_len, std::uint64_t length);

  /// accept() for a fragment of `length` bytes that was received where placement_of() named:
  /// the same checks, nothing copied. The caller vouches that the bytes are there.
  result<fragment_status> accept_placed(std::uint32_t fragment_index, std::uint32_t fragment_count,
                                        std::uint64_t offset, std::uint64_t total_len,
                                        std::uint64_t length);

  /// Moves the message in progress to another destination (two parts, as begin() takes them):
  /// copies the fragments received so far there, and writes the rest there. buffer_too_small
  /// if the parts together are shorter than the message, fragment_mismatch if no message is in
  /// progress or its body is combined (what arrived is no longer there to copy); then nothing
  /// changes. The old destination is not touched again.
  result<void> retarget(std::span<std::byte> head, std::span<std::byte> body);

  /// Whether every fragment of the message in progress has arrived.
  bool complete() const noexcept { return active_ && received_ == fragment_count_; }

  /// The runs of indices not received yet, in order, at most `max_gaps` of them (for a NACK that
  /// must fit a frame); empty when complete or idle.
  std::vector<fragment_gap> missing(
      std::size_t max_gaps = std::numeric_limits<std::size_t>::max()) const;

  /// Whether a message is in progress (begin() has succeeded once).
  bool active() const noexcept { return active_; }
  std::uint64_t message_id() const noexcept { return message_id_; }
  std::uint64_t total_len() const noexcept { return total_len_; }
  std::uint32_t fragment_count() const noexcept { return fragment_count_; }
  /// Distinct fragments of the message in progress received so far.
  std::uint32_t received_fragments() const noexcept { return received_; }
  /// The destination given to begin(), cut to total_len (the body, for a two-part one).
  std::span<std::byte> data() const noexcept { return body_; }

  const reassembly_counters& counters() const noexcept { return counters_; }
  const reassembly_limits& limits() const noexcept { return limits_; }

 private:
  static constexpr std::uint64_t k_unknown_size = 0;

  bool fits_layout(std::uint32_t index, std::uint64_t offset, std::uint64_t length);
  /// accept()'s checks and bookkeeping, without the bytes.
  result<fragment_status> take(std::uint32_t fragment_index, std::uint32_t fragment_count,
                               std::uint64_t offset, std::uint64_t total_len, std::uint64_t length);
  std::uint64_t next_index(bool received, std::uint64_t from) const noexcept;
  std::error_code reject(errc e) noexcept;

  reassembly_limits limits_;
  reassembly_counters counters_;

  std::unique_ptr<std::uint64_t[]> bitmap_;  // bit i: fragment i received
  std::size_t bitmap_words_capacity_ = 0;

  bool active_ = false;
  std::uint64_t message_id_ = 0;
  std::uint64_t total_len_ = 0;
  std::uint32_t fragment_count_ = 0;
  std::uint32_t received_ = 0;
  // Bytes in every fragment but the last; learnt from the first fragment that fixes it (any
  // fragment of a multi-fragment message does), k_unknown_size until then.
  std::uint64_t fragment_size_ = k_unknown_size;
  std::span<std::byte> head_;  // the message's first head_.size() bytes
  std::span<std::byte> body_;  // the rest
  body_combiner combine_;      // how the body is written: copied when empty
};

}  // namespace vessel::wire
