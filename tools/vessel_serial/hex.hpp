#pragma once
// Hex strings of vessel-serial: lowercase out, either case in, whole bytes only.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <span>
#include <vector>

namespace vessel::tools {

/// `bytes` as lowercase hex, two digits per byte ("" for none).
inline std::string to_hex(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    out.push_back(digits[static_cast<unsigned>(b) >> 4]);
    out.push_back(digits[static_cast<unsigned>(b) & 0xF]);
  }
  return out;
}

/// The bytes `text` spells, or nullopt when it has an odd length or a character that is not a hex
/// digit. "" is zero bytes (an empty frame).
inline std::optional<std::vector<std::byte>> from_hex(std::string_view text) {
  if (text.size() % 2 != 0) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::byte> out(text.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(text[2 * i]);
    const int lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<std::byte>((hi << 4) | lo);
  }
  return out;
}

}  // namespace vessel::tools
