#pragma once
// Element types and reduction operators of the collectives. The numbering is part of the wire
// contract of a collective (both sides must agree), so new members go at the end.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace vessel::collectives {

enum class dtype : std::uint8_t {
  int8,
  uint8,
  int32,
  uint32,
  int64,
  uint64,
  float16,   ///< IEEE 754 binary16
  bfloat16,  ///< the upper 16 bits of a binary32
  float32,
  float64,
};

enum class reduce_op : std::uint8_t {
  sum,
  prod,
  min,
  max,
  avg,   ///< reduced as a sum, divided by the contributor count once at the end
  band,  ///< integers only
  bor,   ///< integers only
  bxor,  ///< integers only
};

constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::int8:
    case dtype::uint8: return 1;
    case dtype::float16:
    case dtype::bfloat16: return 2;
    case dtype::int32:
    case dtype::uint32:
    case dtype::float32: return 4;
    case dtype::int64:
    case dtype::uint64:
    case dtype::float64: return 8;
  }
  return 0;
}

constexpr bool is_integer(dtype t) noexcept {
  return t != dtype::float16 && t != dtype::bfloat16 && t != dtype::float32 && t != dtype::float64;
}

/// Whether `op` is defined on `t` (bitwise operators need integers).
constexpr bool supports(dtype t, reduce_op op) noexcept {
  const bool bitwise = op == reduce_op::band || op == reduce_op::bor || op == reduce_op::bxor;
  return !bitwise || is_integer(t);
}

std::string_view to_string(dtype t) noexcept;
std::string_view to_string(reduce_op op) noexcept;
/// Parses the names to_string() prints ("float32", "bfloat16", "sum", "bxor", ...).
std::optional<dtype> parse_dtype(std::string_view name) noexcept;
std::optional<reduce_op> parse_reduce_op(std::string_view name) noexcept;

}  // namespace vessel::collectives
