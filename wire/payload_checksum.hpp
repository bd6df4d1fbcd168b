#pragma once
// End-to-end payload integrity for links that ask for it: the sender seals Frame.crc32c over the
// payload, the receiver checks it before the payload reaches anyone. TCP's own 16-bit checksum
// misses about one corrupted segment in 2^16 (Stone & Partridge, SIGCOMM 2000); CRC32C catches
// every burst up to 32 bits.

#include <span>

#include "wire/crc32c.hpp"
#include "wire/errc.hpp"
#include "wire/frame_header.hpp"
#include "wire/result.hpp"

namespace vessel::wire {

/// Sets header.crc32c to the CRC32C of `payload`.
inline void seal_payload_crc(frame_header& header, std::span<const std::byte> payload) noexcept {
  header.crc32c = crc32c(payload);
}

/// Succeeds when the header carries no CRC, or one that matches `payload`; else errc::crc_mismatch.
inline result<void> check_payload_crc(const frame_header& header,
                                      std::span<const std::byte> payload) noexcept {
  if (header.crc32c && *header.crc32c != crc32c(payload)) return errc::crc_mismatch;
  return outcome::success();
}

}  // namespace vessel::wire
