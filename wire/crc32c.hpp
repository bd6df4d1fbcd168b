#pragma once
// CRC32C (Castagnoli): reflected polynomial 0x82F63B78, init and xorout 0xFFFFFFFF; the check value
// of "123456789" is 0xE3069283. This is the checksum of Frame.crc32c (wire/frame.capnp), the one
// iSCSI, ext4, Btrfs and SCTP use, and the one x86 computes in hardware (SSE4.2 `crc32`).
//
// Written by hand: Debian 12 packages no CRC32C library (no libcrc32c in bookworm; zlib, Boost.CRC
// and libiberty have no hardware path for this polynomial).

#include <cstdint>
#include <span>
#include <string_view>

namespace vessel::wire {

/// CRC32C of `data`, with the fastest implementation this CPU supports.
std::uint32_t crc32c(std::span<const std::byte> data) noexcept;

/// Continues `crc` (a finished CRC32C of the bytes before `data`, 0 for none) over `data`:
/// crc32c_extend(crc32c(a), b) == crc32c(a followed by b).
std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> data) noexcept;

/// Which implementation crc32c() uses on this CPU, for logs and benchmarks: "sse4.2" (the `crc32`
/// instruction on three interleaved streams, combined with carry-less multiplication),
/// "sse4.2-serial" (the `crc32` instruction on one stream, for SSE4.2 CPUs without PCLMULQDQ),
/// or "table" (portable slicing-by-8).
std::string_view crc32c_implementation() noexcept;

/// crc32c_extend() with the portable slicing-by-8 tables, whatever the CPU; for tests and benchmarks.
std::uint32_t crc32c_extend_table(std::uint32_t crc, std::span<const std::byte> data) noexcept;

/// Whether this CPU has SSE4.2 and PCLMULQDQ, which crc32c_extend_sse42() needs.
bool crc32c_sse42_supported() noexcept;

/// crc32c_extend() with the SSE4.2 three-stream path; only call it when crc32c_sse42_supported().
std::uint32_t crc32c_extend_sse42(std::uint32_t crc, std::span<const std::byte> data) noexcept;

}  // namespace vessel::wire
