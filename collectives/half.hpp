#pragma once
// Scalar conversions between float32 and the two 16-bit float formats, rounding to nearest-even
// (the portable path of the reduction kernels and a tool for tests comparing results).
// float16 is IEEE 754 binary16; bfloat16 is the upper half of a binary32. NaNs stay NaN (quieted,
// upper payload bits kept); values past the largest finite round to infinity; subnormals are kept.

#include <bit>
#include <cstdint>

namespace vessel::collectives {

constexpr float float16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  exponent = 113;  // subnormal: normalise the mantissa
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --exponent;
  }
  return std::bit_cast<float>(sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13));
}

constexpr std::uint16_t float_to_float16(float f) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  // 0x477FF000 = 65520, halfway between 65504 (largest half) and 65536: ties to even go up.
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (abs < 0x38800000u) {  // below 2^-14, the smallest normal half
    if (abs <= 0x33000000u) return sign;  // at most 2^-25, half the smallest subnormal: to zero
    const std::uint32_t exponent = abs >> 23;
    const std::uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent;  // 14..24: units of 2^-24
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u) != 0)) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t rebiased = abs - 0x38000000u;  // exponent bias 127 -> 15
  rebiased += 0xFFFu + ((rebiased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rebiased >> 13));
}

constexpr float bfloat16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(std::uint32_t{b} << 16);
}

constexpr std::uint16_t float_to_bfloat16(float f) noexcept {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace vessel::collectives
