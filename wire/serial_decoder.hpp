#pragma once
// Streaming decoder of serial frames (`0xAA | len | payload | crc8`, wire/serial_frame.hpp) over a
// fixed byte ring: bytes go in as the UART delivers them, whole checked frames come out, and the
// decoder resynchronises on garbage, bad CRCs, impossible lengths and frames cut short.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "wire/serial_frame.hpp"
#include "wire/serial_timing.hpp"

namespace vessel::wire {

/// What a serial_decoder has seen. Every byte fed is accounted for exactly once:
/// bytes_in == sum of delivered frame sizes + crc_errors + bad_length + truncated + resync_bytes
///             + buffered().
struct serial_decoder_counters {
  std::uint64_t frames_ok = 0;     ///< frames delivered by next()
  std::uint64_t crc_errors = 0;    ///< candidates whose CRC did not match (their start byte dropped)
  std::uint64_t bad_length = 0;    ///< candidates with len 254 or 255 (their start byte dropped)
  std::uint64_t truncated = 0;     ///< candidates cut short by a silence (their start byte dropped)
  std::uint64_t resync_bytes = 0;  ///< bytes skipped while hunting for a start byte
  std::uint64_t bytes_in = 0;      ///< bytes accepted by feed()

  friend bool operator==(const serial_decoder_counters&, const serial_decoder_counters&) = default;
};

/// Splits a serial byte stream into frames.
///
/// Resynchronisation drops one byte at a time: a candidate frame (a start byte and what follows)
/// that fails for any reason loses only its start byte, and the hunt resumes at the next byte. So a
/// valid frame that starts anywhere inside rejected bytes is still found: it is lost only if an
/// overlapping candidate before it passes the CRC, which CRC-8 lets through 1 time in 256 for random
/// bytes (a property of the protocol, not of this decoder). A candidate whose len says more bytes
/// are coming holds delivery back until they come or the line falls silent for read_timeout; frames
/// that follow are delayed then, never lost.
///
/// Time: a partial frame whose bytes stopped arriving for longer than read_timeout is truncated.
/// The decoder reads no clock itself outside feed()'s default argument; the caller passes `now` to
/// feed() and poll(), so tests inject time. A candidate that spans such a silence is truncated even
/// if its CRC happens to match, whether or not poll() ran during the silence.
///
/// Memory: the ring and the payload buffer are allocated by the constructor; nothing after.
/// One thread at a time (the reactor's, or the bridge actor's).
class serial_decoder {
 public:
  using clock = std::chrono::steady_clock;

  /// Ring size used when none is given: room for four largest frames.
  static constexpr std::size_t default_ring_capacity = 4 * serial_max_frame_bytes;

  /// A decoder for a line at `baud` with `bits_per_char` bits per character (10 for 8N1); its read
  /// timeout is serial_read_timeout(baud, bits_per_char, serial_max_frame_bytes).
  /// Throws std::invalid_argument if ring_capacity < serial_max_frame_bytes (then a largest frame
  /// could never complete, and feed() would refuse bytes forever) or if baud is 0.
  explicit serial_decoder(std::uint32_t baud, unsigned bits_per_char = bits_per_char_8n1,
                          std::size_t ring_capacity = default_ring_capacity);

  /// A decoder with an explicit read timeout (tests, or lines whose timing is known better).
  /// Throws std::invalid_argument if ring_capacity < serial_max_frame_bytes or read_timeout < 0.
  explicit serial_decoder(std::chrono::nanoseconds read_timeout,
                          std::size_t ring_capacity = default_ring_capacity);

  serial_decoder(const serial_decoder&) = delete;
  serial_decoder& operator=(const serial_decoder&) = delete;
  serial_decoder(serial_decoder&&) noexcept = default;
  serial_decoder& operator=(serial_decoder&&) noexcept = default;

  /// Appends as much of `bytes` as the ring has room for, received at `now`, and returns how many it
  /// took. Fewer than bytes.size() means the ring is full: drain next() and feed the rest
  /// (backpressure, never loss). If the line was silent for longer than read_timeout before `now`,
  /// the bytes already buffered are marked stale first, as poll(now) would.
  std::size_t feed(std::span<const std::byte> bytes, clock::time_point now = clock::now()) noexcept;

  /// The payload of the next complete, CRC-checked frame, or nullopt when the buffered bytes hold
  /// none yet. The view points into a buffer owned by the decoder and stays valid until the next
  /// call to next() (feed() and poll() leave it alone).
  std::optional<std::span<const std::byte>> next() noexcept;

  /// Lets time pass: if no byte arrived for longer than read_timeout before `now`, the partial frame
  /// being waited for is truncated and the bytes after its start byte are rescanned (a complete
  /// frame among them is then ready for next()). Returns how many partial frames it truncated.
  std::size_t poll(clock::time_point now) noexcept;

  /// Bytes in the ring that have been neither delivered nor discarded.
  std::size_t buffered() const noexcept { return static_cast<std::size_t>(received_ - consumed_); }

  /// Room left in the ring; feed() takes at most this many bytes.
  std::size_t free_space() const noexcept { return capacity_ - buffered(); }

  std::size_t capacity() const noexcept { return capacity_; }
  std::chrono::nanoseconds read_timeout() const noexcept { return read_timeout_; }
  const serial_decoder_counters& counters() const noexcept { return counters_; }

 private:
  /// Discards what cannot start a frame until the head is a complete valid frame (true, its payload
  /// length in ready_len_) or the buffered bytes cannot be decided yet (false).
  bool advance() noexcept;

  /// The byte `offset` bytes after the head.
  std::byte at(std::size_t offset) const noexcept;

  /// Copies `n` bytes starting `offset` bytes after the head into `dst`.
  void copy_out(std::size_t offset, std::size_t n, std::byte* dst) const noexcept;

  /// CRC-8 of `n` bytes starting `offset` bytes after the head.
  std::uint8_t crc_of(std::size_t offset, std::size_t n) const noexcept;

  /// Drops `n` bytes at the head.
  void consume(std::size_t n) noexcept;

  /// Marks every buffered byte stale if the line has been silent longer than read_timeout_.
  void note_silence(clock::time_point now) noexcept;

  std::unique_ptr<std::byte[]> ring_;
  std::size_t capacity_;
  std::size_t head_ = 0;  // ring index of the oldest buffered byte
  // Stream positions (bytes since construction). Bytes before stale_end_ arrived before the latest
  // silence longer than read_timeout_: a candidate starting there cannot be completed any more.
  std::uint64_t consumed_ = 0;
  std::uint64_t received_ = 0;
  std::uint64_t stale_end_ = 0;
  std::size_t ready_len_ = 0;
  std::chrono::nanoseconds read_timeout_;
  clock::time_point last_rx_{};
  serial_decoder_counters counters_;
  std::array<std::byte, serial_max_payload> payload_{};
};

}  // namespace vessel::wire
