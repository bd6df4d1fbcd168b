#pragma once
// CRC-8/SMBUS (poly 0x07, init 0x00, no reflection, xorout 0x00; check("123456789") = 0xF4), the
// checksum of the serial frame `0xAA | len | payload | crc8`.
//
// Hand-written: no Debian 12 package provides CRC-8/SMBUS (Boost.CRC can be parameterised to it, but
// its table lives in a function-local static and it is not constexpr, so the firmware-side C99 twin
// and the compile-time checks below could not share one definition). A 256-byte table, one lookup
// per byte: a UART moves at most ~1 MB/s, so slicing-by-N would buy nothing worth its 2 KiB of tables.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace vessel::wire {

namespace detail {

/// The 256-entry table of CRC-8 poly 0x07, MSB first, computed at compile time.
consteval std::array<std::uint8_t, 256> make_crc8_smbus_table() noexcept {
  std::array<std::uint8_t, 256> table{};
  for (unsigned value = 0; value < 256; ++value) {
    unsigned crc = value;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x80u) != 0 ? ((crc << 1) ^ 0x07u) : (crc << 1);
    }
    table[value] = static_cast<std::uint8_t>(crc & 0xFFu);
  }
  return table;
}

inline constexpr std::array<std::uint8_t, 256> crc8_smbus_table = make_crc8_smbus_table();

}  // namespace detail

/// The CRC-8/SMBUS value before any byte: its init (0x00).
inline constexpr std::uint8_t crc8_init = 0x00;

/// Extends `crc` over one byte. Chainable: crc8_update(crc8_update(c, a), b) == crc8 over a then b.
constexpr std::uint8_t crc8_update(std::uint8_t crc, std::byte b) noexcept {
  return detail::crc8_smbus_table[crc ^ static_cast<std::uint8_t>(b)];
}

/// Extends `crc` over `bytes` (the incremental form: feed a message in any number of pieces).
constexpr std::uint8_t crc8_update(std::uint8_t crc, std::span<const std::byte> bytes) noexcept {
  for (std::byte b : bytes) crc = crc8_update(crc, b);
  return crc;  // xorout is 0x00, so the running value is the final value
}

/// CRC-8/SMBUS of `bytes` in one piece.
constexpr std::uint8_t crc8(std::span<const std::byte> bytes) noexcept {
  return crc8_update(crc8_init, bytes);
}

}  // namespace vessel::wire
