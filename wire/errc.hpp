#pragma once
// Typed errors of the wire layer, usable as std::error_code (no allocation, comparable by value).

#include <system_error>

namespace vessel::wire {

/// Why a frame could not be encoded, decoded or reassembled.
enum class errc {
  header_too_small = 1,      ///< header_len is shorter than the smallest Cap'n Proto message.
  header_too_large,          ///< header_len exceeds decoder_limits::max_header_bytes.
  header_misaligned,         ///< header_len is not a whole number of 8-byte words.
  bad_segment_table,         ///< the segment table disagrees with header_len.
  malformed_header,          ///< Cap'n Proto rejected the header message.
  unsupported_version,       ///< the header's version is newer than this build understands.
  unknown_kind,              ///< the header's union holds a kind this build does not know.
  bad_field,                 ///< a field is out of its range (e.g. a challenge that is not 32 bytes).
  payload_too_large,         ///< payloadLen exceeds decoder_limits::max_payload_bytes.
  too_many_fragments,        ///< fragmentCount exceeds the reassembly limit.
  fragment_out_of_range,     ///< fragmentIndex >= fragmentCount, or the bytes fall outside totalLen.
  fragment_mismatch,         ///< a fragment disagrees with the message it claims to belong to.
  message_too_large,         ///< totalLen exceeds the reassembly limit.
  crc_mismatch,              ///< the payload's CRC32C differs from the one in the header.
  buffer_too_small,          ///< the destination cannot hold what must be written into it.
  serial_payload_too_large,  ///< a serial frame payload exceeds 253 bytes.
};

const std::error_category& wire_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), wire_category()};
}

}  // namespace vessel::wire

template <>
struct std::is_error_code_enum<vessel::wire::errc> : std::true_type {};
