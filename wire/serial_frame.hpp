#pragma once
// The serial frame of UART boards: `0xAA | len (0..253) | payload (len bytes) | crc8`, where crc8 is
// CRC-8/SMBUS (wire/crc8.hpp) over the len byte and the payload. Decoding lives in
// wire/serial_decoder.hpp.

#include <cstddef>
#include <span>

#include "wire/result.hpp"

namespace vessel::wire {

/// First byte of every serial frame; the decoder hunts for it to (re)synchronise.
inline constexpr std::byte serial_start_byte{0xAA};

/// Largest payload: len is one byte, and 254/255 are kept invalid so that a whole frame fits in
/// 256 bytes (one page of a board's DMA buffer) and a decoder can reject them without waiting.
inline constexpr std::size_t serial_max_payload = 253;

/// Bytes a frame adds to its payload: start byte, len byte, CRC byte.
inline constexpr std::size_t serial_frame_overhead = 3;

/// Largest frame on the line (256 bytes).
inline constexpr std::size_t serial_max_frame_bytes = serial_max_payload + serial_frame_overhead;

/// Size of the frame that carries `payload_bytes` bytes.
constexpr std::size_t serial_frame_size(std::size_t payload_bytes) noexcept {
  return payload_bytes + serial_frame_overhead;
}

/// Writes the frame carrying `payload` at the start of `out` and returns its size
/// (payload.size() + 3). errc::serial_payload_too_large above 253 bytes, errc::buffer_too_small when
/// `out` is shorter than the frame; `out` is untouched on error. `payload` may overlap `out`.
result<std::size_t> encode_serial_frame(std::span<const std::byte> payload,
                                        std::span<std::byte> out) noexcept;

}  // namespace vessel::wire
