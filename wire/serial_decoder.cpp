#include "wire/serial_decoder.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "wire/crc8.hpp"

namespace vessel::wire {
namespace {

std::chrono::nanoseconds timeout_for_line(std::uint32_t baud, unsigned bits_per_char) {
  if (baud == 0) throw std::invalid_argument("serial_decoder: baud must be positive");
  // The silence allowed mid-frame is the one a whole largest frame may take: a board that sends a
  // header, computes, then sends the payload is still within it.
  return serial_read_timeout(baud, bits_per_char, serial_max_frame_bytes);
}

}  // namespace

serial_decoder::serial_decoder(std::uint32_t baud, unsigned bits_per_char, std::size_t ring_capacity)
    : serial_decoder(timeout_for_line(baud, bits_per_char), ring_capacity) {}

serial_decoder::serial_decoder(std::chrono::nanoseconds read_timeout, std::size_t ring_capacity)
    : capacity_(ring_capacity), read_timeout_(read_timeout) {
  if (ring_capacity < serial_max_frame_bytes) {
    throw std::invalid_argument("serial_decoder: ring must hold at least one 256-byte frame");
  }
  if (read_timeout < std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("serial_decoder: read timeout must not be negative");
  }
  ring_ = std::make_unique<std::byte[]>(ring_capacity);
}

std::size_t serial_decoder::feed(std::span<const std::byte> bytes, clock::time_point now) noexcept {
  note_silence(now);
  const std::size_t n = std::min(bytes.size(), free_space());
  if (n == 0) return 0;
  std::size_t tail = head_ + buffered();
  if (tail >= capacity_) tail -= capacity_;
  const std::size_t first = std::min(n, capacity_ - tail);
  std::memcpy(ring_.get() + tail, bytes.data(), first);
  if (n > first) std::memcpy(ring_.get(), bytes.data() + first, n - first);
  received_ += n;
  counters_.bytes_in += n;
  last_rx_ = now;
  return n;
}

std::optional<std::span<const std::byte>> serial_decoder::next() noexcept {
  if (!advance()) return std::nullopt;
  const std::size_t len = ready_len_;
  copy_out(2, len, payload_.data());
  consume(serial_frame_size(len));
  ++counters_.frames_ok;
  return std::span<const std::byte>{payload_.data(), len};
}

std::size_t serial_decoder::poll(clock::time_point now) noexcept {
  note_silence(now);
  const std::uint64_t before = counters_.truncated;
  advance();
  return static_cast<std::size_t>(counters_.truncated - before);
}

void serial_decoder::note_silence(clock::time_point now) noexcept {
  if (received_ > consumed_ && now - last_rx_ > read_timeout_) stale_end_ = received_;
}

bool serial_decoder::advance() noexcept {
  for (;;) {
    const std::size_t avail = buffered();
    if (avail == 0) return false;

    if (at(0) != serial_start_byte) {
      // Hunt: skip to the next start byte within the contiguous part of the ring.
      const std::size_t run = std::min(avail, capacity_ - head_);
      const void* hit = std::memchr(ring_.get() + head_, static_cast<int>(serial_start_byte), run);
      const std::size_t skip =
          hit == nullptr ? run : static_cast<std::size_t>(static_cast<const std::byte*>(hit) - (ring_.get() + head_));
      counters_.resync_bytes += skip;
      consume(skip);
      continue;
    }

    // A candidate starts at the head. Any failure below drops the start byte only, so that a frame
    // starting at any later byte of the candidate is still found.
    const bool stale = consumed_ < stale_end_;
    if (avail < 2) {
      if (!stale) return false;
      ++counters_.truncated;
      consume(1);
      continue;
    }
    const auto len = static_cast<std::size_t>(at(1));
    if (len > serial_max_payload) {
      ++counters_.bad_length;
      consume(1);
      continue;
    }
    const std::size_t size = serial_frame_size(len);
    if (stale && (avail < size || consumed_ + size > stale_end_)) {
      // Its bytes stopped arriving (or resumed only after the silence): the rest will never come.
      ++counters_.truncated;
      consume(1);
      continue;
    }
    if (avail < size) return false;
    if (crc_of(1, len + 1) == static_cast<std::uint8_t>(at(size - 1))) {
      ready_len_ = len;
      return true;
    }
    ++counters_.crc_errors;
    consume(1);
  }
}

std::byte serial_decoder::at(std::size_t offset) const noexcept {
  std::size_t i = head_ + offset;
  if (i >= capacity_) i -= capacity_;
  return ring_[i];
}

void serial_decoder::copy_out(std::size_t offset, std::size_t n, std::byte* dst) const noexcept {
  std::size_t i = head_ + offset;
  if (i >= capacity_) i -= capacity_;
  const std::size_t first = std::min(n, capacity_ - i);
  if (first != 0) std::memcpy(dst, ring_.get() + i, first);
  if (n > first) std::memcpy(dst + first, ring_.get(), n - first);
}

std::uint8_t serial_decoder::crc_of(std::size_t offset, std::size_t n) const noexcept {
  std::size_t i = head_ + offset;
  if (i >= capacity_) i -= capacity_;
  const std::size_t first = std::min(n, capacity_ - i);
  std::uint8_t crc = crc8_update(crc8_init, std::span<const std::byte>{ring_.get() + i, first});
  return crc8_update(crc, std::span<const std::byte>{ring_.get(), n - first});
}

void serial_decoder::consume(std::size_t n) noexcept {
  head_ += n;
  if (head_ >= capacity_) head_ -= capacity_;
  consumed_ += n;
}

}  // namespace vessel::wire
