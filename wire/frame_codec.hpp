#pragma once
// Frame encoder and header decoder: `u32 LE header_len | Cap'n Proto header | payload`
// (docs/wire.md). The payload is never copied and never enters the Cap'n Proto message.

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "wire/frame_header.hpp"
#include "wire/result.hpp"

namespace vessel::wire {

/// Bytes of the little-endian header_len prefix.
inline constexpr std::size_t prefix_bytes = 4;

/// The smallest header_len: a one-entry segment table (8 bytes) and a root pointer (8 bytes).
inline constexpr std::size_t min_header_bytes = 16;

/// The largest header the encoder produces (a hello carrying both nonces needs 18 words plus the
/// 8-byte segment table, 152 bytes); a receiver's max_header_bytes must be at least this.
inline constexpr std::size_t max_encoded_header_bytes = 8 + 32 * 8;

/// Bounds a receiver enforces before it allocates or waits for anything; set once per decoder.
struct decoder_limits {
  std::uint32_t max_header_bytes = 4096;  ///< header_len above this is header_too_large
  /// payloadLen above this is payload_too_large: a 1 MiB fragment plus room for a small trailer.
  std::uint32_t max_payload_bytes = (1u << 20) + 4096;
  std::uint32_t max_fragments = 1u << 16;  ///< fragmentCount above this is too_many_fragments
  std::uint32_t max_segments = 16;  ///< more header segments than this is bad_segment_table
  /// Receive buffer of a stream_decoder; 0 or anything smaller means one largest frame.
  std::size_t receive_buffer_bytes = 0;
};

/// Builds frames without heap allocation: the header is built in a fixed, zeroed segment owned by
/// the encoder and serialized into the encoder's own bytes; the payload stays where it is. Data
/// frames (every message) skip Cap'n Proto's builder: their bytes are written directly, identical
/// to what it writes; decode_header() likewise reads them without its reader.
class frame_encoder {
 public:
  frame_encoder() noexcept = default;

  /// Encodes `header` for `payload`, whose size must equal header.payload_len (else bad_field).
  /// Returns {prefix + header bytes (inside this encoder), the caller's payload}; both stay valid
  /// until the next encode or the encoder's end.
  result<std::array<iovec, 2>> encode(const frame_header& header,
                                      std::span<const std::byte> payload) noexcept;

  /// Encodes `header` alone (its payload, header.payload_len bytes, travels apart: in two
  /// parts, say). Returns the prefix and header bytes, valid as encode()'s.
  result<std::span<const std::byte>> encode_header(const frame_header& header) noexcept;

  /// The prefix and header bytes of the last successful encode (empty before one).
  std::span<const std::byte> header_bytes() const noexcept;

  /// Encodes and appends the whole frame (prefix, header, payload) to `out`: for tests and tools,
  /// it allocates.
  result<void> encode_to(const frame_header& header, std::span<const std::byte> payload,
                         std::vector<std::byte>& out);

 private:
  static constexpr std::size_t segment_words = 32;  // the largest header uses 18 (see above)
  // Zero between encodes: MallocMessageBuilder needs a zeroed first segment and zeroes what it
  // used when it is destroyed, so the memory is cleared once per frame, not twice.
  std::array<std::uint64_t, segment_words> segment_{};
  // 4 unused bytes, then the prefix, so that the segment table and segment stay 8-byte aligned.
  alignas(8) std::array<std::byte, 8 + 8 + segment_words * 8> out_{};
  std::size_t out_len_ = 0;  // bytes of out_ from offset 4 that hold the last frame's header
};

/// Decodes one header message (segment table then segments, exactly as capnp::writeMessage writes
/// it, without the u32 prefix). `message` must start 8-byte aligned (Cap'n Proto reads words in
/// place; unaligned input is malformed_header). Checks everything a frame header can get wrong
/// except the CRC, which is checked against the payload by the caller.
result<frame_header> decode_header(std::span<const std::byte> message,
                                   const decoder_limits& limits) noexcept;

namespace detail {
/// The generic Cap'n Proto paths that encode() and decode_header() bypass for data frames; for
/// tests that compare the two. decode_header() without the data-frame fast path:
result<frame_header> decode_header_with_capnp(std::span<const std::byte> message,
                                              const decoder_limits& limits) noexcept;
/// The header message (segment table, one segment) MallocMessageBuilder writes; empty on failure.
std::vector<std::byte> encode_header_with_capnp(const frame_header& header);
}  // namespace detail

}  // namespace vessel::wire
