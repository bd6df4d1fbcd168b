#include "collectives/reduce.hpp"

#include <cstring>
#include <type_traits>

#include "collectives/errc.hpp"

namespace vessel::collectives {
namespace {

template <class T>
T load(const std::byte* p) noexcept {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <class T>
void store(std::byte* p, T value) noexcept {
  std::memcpy(p, &value, sizeof(T));
}

float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  std::uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t f32_to_f16(float f) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN: quiet, keep the top payload bits
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  }
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds past max
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal: rounds to zero
    const std::uint32_t exponent = abs >> 23;
    const std::uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent;  // 14..24
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t rounded = abs - 0x38000000u;  // rebias 127 -> 15
  rounded += 0xFFFu + ((rounded >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

float bf16_to_f32(std::uint16_t b) noexcept {
  const std::uint32_t bits = std::uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

template <class T>
T apply(T a, T b, reduce_op op) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case reduce_op::sum:
      case reduce_op::avg: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case reduce_op::prod: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case reduce_op::min: return b < a ? b : a;
      case reduce_op::max: return a < b ? b : a;
      case reduce_op::band: return static_cast<T>(a & b);
      case reduce_op::bor: return static_cast<T>(a | b);
      case reduce_op::bxor: return static_cast<T>(a ^ b);
    }
    return a;
  } else {
    switch (op) {
      case reduce_op::sum:
      case reduce_op::avg: return a + b;
      case reduce_op::prod: return a * b;
      case reduce_op::min: return b != b ? b : (b < a ? b : a);
      case reduce_op::max: return b != b ? b : (a < b ? b : a);
      default: return a;
    }
  }
}

template <class T>
void reduce_scalar(std::byte* inout, const std::byte* in, std::size_t n, reduce_op op) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t at = i * sizeof(T);
    store(inout + at, apply(load<T>(inout + at), load<T>(in + at), op));
  }
}

template <float (*Widen)(std::uint16_t), std::uint16_t (*Narrow)(float)>
void reduce_half_scalar(std::byte* inout, const std::byte* in, std::size_t n,
                        reduce_op op) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t at = i * 2;
    const float a = Widen(load<std::uint16_t>(inout + at));
    const float b = Widen(load<std::uint16_t>(in + at));
    store(inout + at, Narrow(apply(a, b, op)));
  }
}

template <class T>
void divide_scalar(std::byte* inout, std::size_t n, std::uint32_t by) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t at = i * sizeof(T);
    if constexpr (std::is_signed_v<T> && std::is_integral_v<T>) {
      // Divided in 64 bits: the count may not fit T (int8 with 200 contributors).
      store(inout + at, static_cast<T>(std::int64_t{load<T>(inout + at)} / std::int64_t{by}));
    } else if constexpr (std::is_integral_v<T>) {
      store(inout + at, static_cast<T>(std::uint64_t{load<T>(inout + at)} / by));
    } else {
      store(inout + at, static_cast<T>(load<T>(inout + at) / static_cast<T>(by)));
    }
  }
}

bool known(dtype t) noexcept { return size_of(t) != 0; }

}  // namespace

result<void> reduce_into(std::span<std::byte> inout, std::span<const std::byte> in, dtype t,
                         reduce_op op) noexcept {
  if (!known(t)) return errc::unsupported_type;
  if (static_cast<std::uint8_t>(op) > static_cast<std::uint8_t>(reduce_op::bxor)) {
    return errc::unsupported_op;
  }
  if (!supports(t, op)) return errc::unsupported_op;
  if (inout.size() != in.size() || inout.size() % size_of(t) != 0) return errc::size_mismatch;
  const std::size_t n = inout.size() / size_of(t);
  std::byte* out = inout.data();
  const std::byte* src = in.data();
  switch (t) {
    case dtype::int8: reduce_scalar<std::int8_t>(out, src, n, op); break;
    case dtype::uint8: reduce_scalar<std::uint8_t>(out, src, n, op); break;
    case dtype::int32: reduce_scalar<std::int32_t>(out, src, n, op); break;
    case dtype::uint32: reduce_scalar<std::uint32_t>(out, src, n, op); break;
    case dtype::int64: reduce_scalar<std::int64_t>(out, src, n, op); break;
    case dtype::uint64: reduce_scalar<std::uint64_t>(out, src, n, op); break;
    case dtype::float16: reduce_half_scalar<f16_to_f32, f32_to_f16>(out, src, n, op); break;
    case dtype::bfloat16: reduce_half_scalar<bf16_to_f32, f32_to_bf16>(out, src, n, op); break;
    case dtype::float32: reduce_scalar<float>(out, src, n, op); break;
    case dtype::float64: reduce_scalar<double>(out, src, n, op); break;
  }
  return outcome::success();
}

result<void> finish_average(std::span<std::byte> inout, dtype t,
                            std::uint32_t contributors) noexcept {
  if (!known(t)) return errc::unsupported_type;
  if (contributors == 0) return errc::invalid_argument;
  if (inout.size() % size_of(t) != 0) return errc::size_mismatch;
  const std::size_t n = inout.size() / size_of(t);
  std::byte* out = inout.data();
  switch (t) {
    case dtype::int8: divide_scalar<std::int8_t>(out, n, contributors); break;
    case dtype::uint8: divide_scalar<std::uint8_t>(out, n, contributors); break;
    case dtype::int32: divide_scalar<std::int32_t>(out, n, contributors); break;
    case dtype::uint32: divide_scalar<std::uint32_t>(out, n, contributors); break;
    case dtype::int64: divide_scalar<std::int64_t>(out, n, contributors); break;
    case dtype::uint64: divide_scalar<std::uint64_t>(out, n, contributors); break;
    case dtype::float32: divide_scalar<float>(out, n, contributors); break;
    case dtype::float64: divide_scalar<double>(out, n, contributors); break;
    case dtype::float16:
      for (std::size_t i = 0; i < n; ++i) {
        store(out + 2 * i, f32_to_f16(f16_to_f32(load<std::uint16_t>(out + 2 * i)) /
                                      static_cast<float>(contributors)));
      }
      break;
    case dtype::bfloat16:
      for (std::size_t i = 0; i < n; ++i) {
        store(out + 2 * i, f32_to_bf16(bf16_to_f32(load<std::uint16_t>(out + 2 * i)) /
                                       static_cast<float>(contributors)));
      }
      break;
  }
  return outcome::success();
}

}  // namespace vessel::collectives
