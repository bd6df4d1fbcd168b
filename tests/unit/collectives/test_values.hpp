#pragma once
// Element values for collective tests: small integers, stored exactly in every dtype (float16
// and bfloat16 included), so that a reduction gives the same bits in any order and a serial
// reference can be exact.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/dtype.hpp"

namespace vessel::collectives::testing {

/// Writes `v` (|v| <= 256) as one element of type `t`.
inline void store_small(dtype t, std::byte* at, std::int64_t v) {
  const auto put = [at](auto x) { std::memcpy(at, &x, sizeof x); };
  const std::uint32_t f = std::bit_cast<std::uint32_t>(static_cast<float>(v));
  switch (t) {
    case dtype::int8: put(static_cast<std::int8_t>(v)); break;
    case dtype::uint8: put(static_cast<std::uint8_t>(v)); break;
    case dtype::int32: put(static_cast<std::int32_t>(v)); break;
    case dtype::uint32: put(static_cast<std::uint32_t>(v)); break;
    case dtype::int64: put(static_cast<std::int64_t>(v)); break;
    case dtype::uint64: put(static_cast<std::uint64_t>(v)); break;
    case dtype::float32: put(static_cast<float>(v)); break;
    case dtype::float64: put(static_cast<double>(v)); break;
    case dtype::bfloat16: put(static_cast<std::uint16_t>(f >> 16)); break;
    case dtype::float16: {
      // A small integer has at most 10 mantissa bits: the conversion only rebiases.
      std::uint16_t h = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
      if ((f & 0x7FFFFFFFu) != 0) {
        const std::uint32_t exponent = ((f >> 23) & 0xFFu) - 127 + 15;
        h = static_cast<std::uint16_t>(h | exponent << 10 | ((f >> 13) & 0x3FFu));
      }
      put(h);
      break;
    }
  }
}

/// A value for `op` that keeps every reduction over up to 256 ranks exact: sums of 0/1,
/// products of +-1 (1/2 for unsigned types, which wrap exactly), anything small for min/max,
/// any bit pattern below 128 for bitwise operators.
inline std::int64_t exact_sample(dtype t, reduce_op op, std::mt19937_64& random) {
  const bool is_signed = t != dtype::uint8 && t != dtype::uint32 && t != dtype::uint64;
  const auto pick = [&random](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(random);
  };
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg: return pick(0, 1);
    case reduce_op::prod: return is_signed ? (pick(0, 1) != 0 ? 1 : -1) : pick(1, 2);
    case reduce_op::min:
    case reduce_op::max: return is_signed ? pick(-3, 3) : pick(0, 6);
    case reduce_op::band:
    case reduce_op::bor:
    case reduce_op::bxor: return pick(0, 127);
  }
  return 0;
}

inline std::vector<std::byte> exact_values(dtype t, reduce_op op, std::size_t count,
                                           std::mt19937_64& random) {
  std::vector<std::byte> bytes(count * size_of(t));
  for (std::size_t i = 0; i < count; ++i) {
    store_small(t, bytes.data() + i * size_of(t), exact_sample(t, op, random));
  }
  return bytes;
}

inline std::vector<std::byte> random_bytes(std::size_t n, std::mt19937_64& random) {
  std::vector<std::byte> bytes(n);
  for (auto& b : bytes) b = static_cast<std::byte>(random());
  return bytes;
}

/// The sizes every algorithm is checked at: all small worlds, non-powers of two included.
inline std::vector<std::uint32_t> world_sizes() {
  std::vector<std::uint32_t> sizes;
  for (std::uint32_t p = 1; p <= 17; ++p) sizes.push_back(p);
  sizes.push_back(64);
  sizes.push_back(256);
  return sizes;
}

/// Roots worth trying in a world of p: first, middle, last.
inline std::vector<std::uint32_t> roots_for(std::uint32_t p) {
  std::vector<std::uint32_t> roots{0};
  if (p / 2 != 0) roots.push_back(p / 2);
  if (p - 1 != p / 2 && p - 1 != 0) roots.push_back(p - 1);
  return roots;
}

}  // namespace vessel::collectives::testing
