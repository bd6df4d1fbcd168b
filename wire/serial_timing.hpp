#pragma once
// Serial line timing derived from baud and character format: how long a byte and a frame take on the
// wire, and how long a reader waits before it calls a partial frame truncated.

#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace vessel::wire {

/// Parity setting of a UART character; every setting but `none` costs one bit per character.
enum class serial_parity { none, odd, even, mark, space };

/// Bits on the line per character: 1 start bit + data bits + parity bit (if any) + stop bits.
/// 8N1 = 10, 8E1 = 11, 7E2 = 11. Preconditions: 5 <= data_bits <= 9, 1 <= stop_bits <= 2.
constexpr unsigned bits_per_char(unsigned data_bits, serial_parity parity, unsigned stop_bits) noexcept {
  return 1u + data_bits + (parity == serial_parity::none ? 0u : 1u) + stop_bits;
}

/// The format every vessel board uses (8 data bits, no parity, 1 stop bit).
inline constexpr unsigned bits_per_char_8n1 = bits_per_char(8, serial_parity::none, 1);

/// Time `frame_bytes` characters take at `baud`, rounded up to the nanosecond (a timeout built on it
/// must never be shorter than the line needs). Computed from the total bit count, not byte time x n,
/// so that rounding does not accumulate. Precondition: baud > 0.
constexpr std::chrono::nanoseconds serial_frame_time(std::uint32_t baud, unsigned bits_per_char,
                                                     std::size_t frame_bytes) noexcept {
  assert(baud > 0);
  const std::uint64_t bits = std::uint64_t{bits_per_char} * frame_bytes;
  return std::chrono::nanoseconds{
      static_cast<std::chrono::nanoseconds::rep>((bits * 1'000'000'000u + baud - 1) / baud)};
}

/// Time one character takes at `baud` (115200 8N1: 86.806 us; 9600 8N1: 1.041667 ms).
constexpr std::chrono::nanoseconds serial_byte_time(std::uint32_t baud, unsigned bits_per_char) noexcept {
  return serial_frame_time(baud, bits_per_char, 1);
}

/// Default multiplier of the frame time in serial_read_timeout. 2x, because board firmware does not
/// stream back to back: an ISR or a DMA half-transfer callback can stall transmission mid-frame, and
/// a frame sent at half the line rate must still not be called truncated. (Clock tolerance, +-2-3%
/// on a UART, is far inside that margin.)
inline constexpr unsigned serial_timeout_safety_factor = 2;

/// Default constant added in serial_read_timeout, covering what the baud rate does not: an FTDI
/// FT232 USB-serial adapter holds received bytes up to its latency timer (16 ms by default) before
/// the USB transfer, USB full-speed polls every 1 ms, and a loaded Linux host may schedule the reader
/// a few ms late. 16 + 1 + 3 = 20 ms. Without it a fast line (1 Mbaud: 2.6 ms per 256-byte frame)
/// would time out on adapter latency alone.
inline constexpr std::chrono::nanoseconds serial_timeout_floor = std::chrono::milliseconds{20};

/// How long a reader may see no byte before it discards a partial frame of `frame_bytes`:
/// frame time x safety_factor + floor. 115200 8N1, 256 bytes: 22.2 ms x 2 + 20 ms = 64.4 ms;
/// 9600 8N1, 256 bytes: 266.7 ms x 2 + 20 ms = 553.3 ms.
constexpr std::chrono::nanoseconds serial_read_timeout(
    std::uint32_t baud, unsigned bits_per_char, std::size_t frame_bytes,
    unsigned safety_factor = serial_timeout_safety_factor,
    std::chrono::nanoseconds floor = serial_timeout_floor) noexcept {
  return serial_frame_time(baud, bits_per_char, frame_bytes) * safety_factor + floor;
}

}  // namespace vessel::wire
