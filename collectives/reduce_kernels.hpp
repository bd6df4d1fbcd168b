#pragma once
// Internal to reduce.cpp: the reduction loops written once with GCC vector extensions, inlined
// into one function per instruction set (baseline SSE2, AVX2, AVX-512) so that each copy is
// compiled with that set's vector width. Loads and stores go through memcpy: buffers come from
// frames at any alignment, and an unaligned vector load costs nothing on the CPUs we target.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/dtype.hpp"

namespace vessel::collectives::kernels {

/// Bytes of each operand handled per loop iteration: four AVX2 registers (eight SSE2 ones) keep
/// enough loads in flight to stream at memory bandwidth.
inline constexpr std::size_t block_bytes = 128;

template <class T, std::size_t Bytes>
using vec [[gnu::vector_size(Bytes)]] = T;

/// The lane type an operator works in: wrap-around arithmetic on signed integers is done on
/// unsigned lanes (same bits, no undefined behaviour); comparisons need the signed type.
template <class T, reduce_op Op>
struct lane {
  using type = T;
};
template <class T, reduce_op Op>
requires(std::is_integral_v<T>&& Op != reduce_op::min && Op != reduce_op::max) struct lane<T, Op> {
  using type = std::make_unsigned_t<T>;
};
template <class T, reduce_op Op>
using lane_t = typename lane<T, Op>::type;

/// a = mask ? b : a per lane, mask lanes all ones or all zeros. Spelled with and/or because GCC
/// lowers a vector ?: wider than the hardware's registers lane by lane into scalar code.
template <class V, class M>
[[gnu::always_inline]] inline void assign_where(V& a, const M& mask, const V& b) noexcept {
  a = reinterpret_cast<V>((reinterpret_cast<M>(b) & mask) | (reinterpret_cast<M>(a) & ~mask));
}

/// a = a op b, lane by lane; V is a vector of Lane (or Lane itself).
template <reduce_op Op, class Lane, class V>
[[gnu::always_inline]] inline void combine(V& a, const V& b) noexcept {
  if constexpr (Op == reduce_op::sum || Op == reduce_op::avg) {
    a = a + b;
  } else if constexpr (Op == reduce_op::prod) {
    a = a * b;
  } else if constexpr (Op == reduce_op::min || Op == reduce_op::max) {
    if constexpr (std::is_arithmetic_v<V>) {  // a scalar (the portable float16 loop)
      if constexpr (Op == reduce_op::min) {
        a = b < a ? b : a;
      } else {
        a = a < b ? b : a;
      }
      if constexpr (std::is_floating_point_v<Lane>) a = b != b ? b : a;
    } else {
      // Equal operands (+0, -0) keep a.
      if constexpr (Op == reduce_op::min) {
        assign_where(a, b < a, b);
      } else {
        assign_where(a, a < b, b);
      }
      // NaN propagates from either side; a NaN a already survived the compare above.
      if constexpr (std::is_floating_point_v<Lane>) assign_where(a, b != b, b);
    }
  } else if constexpr (Op == reduce_op::band) {
    a = a & b;
  } else if constexpr (Op == reduce_op::bor) {
    a = a | b;
  } else if constexpr (Op == reduce_op::bxor) {
    a = a ^ b;
  }
}

// Out-parameter rather than return value: returning a 64-byte vector from a function compiled
// without AVX-512 draws an ABI warning even when it is always inlined.
template <class V>
[[gnu::always_inline]] inline void load(V& v, const std::byte* p) noexcept {
  std::memcpy(&v, p, sizeof v);
}

template <class V>
[[gnu::always_inline]] inline void store(std::byte* p, const V& v) noexcept {
  std::memcpy(p, &v, sizeof v);
}

/// Every block below computes out = left op right over block_bytes.

/// One block of a natively supported type, in vectors of VB bytes: the register width of the
/// instruction set (16 for SSE2, 32 for AVX2). Wider generic vectors would be split by GCC, but
/// their compares are split into scalar code.
template <class T, reduce_op Op, std::size_t VB>
[[gnu::always_inline]] inline void native_block(std::byte* out, const std::byte* left,
                                                const std::byte* right) noexcept {
  using Lane = lane_t<T, Op>;
  using V = vec<Lane, VB>;
  // A constant trip count: GCC unrolls it and keeps every vector in a register.
  for (std::size_t at = 0; at < block_bytes; at += VB) {
    V a, b;
    load(a, left + at);
    load(b, right + at);
    combine<Op, Lane>(a, b);
    store(out + at, a);
  }
}

/// Rounds float32 bit patterns to bfloat16 (nearest-even, NaN quieted) in the upper 16 bits of
/// each lane; the lower 16 bits are garbage.
template <class W>
[[gnu::always_inline]] inline void round_to_bfloat16_high(W& bits) noexcept {
  using S = vec<std::int32_t, sizeof(W)>;
  // A signed compare on the magnitude: x86 has no unsigned vector compare, and GCC would
  // otherwise split it into scalar ones.
  const auto is_nan = reinterpret_cast<S>(bits & 0x7FFFFFFFu) > 0x7F800000;
  const W quiet_nan = bits | 0x00400000u;
  bits = bits + 0x7FFFu + ((bits >> 16) & 1u);
  assign_where(bits, reinterpret_cast<W>(is_nan), quiet_nan);
}

/// One block of bfloat16. Each 32-bit lane holds two elements: the upper one is already a float32
/// once its lower half is masked off, the lower one once shifted up. Everything stays in 32-bit
/// lanes, so neither SSE2 nor AVX2 needs a widening or narrowing shuffle.
template <reduce_op Op, std::size_t VB>
[[gnu::always_inline]] inline void bfloat16_block(std::byte* out, const std::byte* left,
                                                  const std::byte* right) noexcept {
  using W = vec<std::uint32_t, VB>;
  using F = vec<float, VB>;
  for (std::size_t at = 0; at < block_bytes; at += VB) {
    W a, b;
    load(a, left + at);
    load(b, right + at);
    F a_low = reinterpret_cast<F>(a << 16);
    F a_high = reinterpret_cast<F>(a & 0xFFFF0000u);
    combine<Op, float>(a_low, reinterpret_cast<F>(b << 16));
    combine<Op, float>(a_high, reinterpret_cast<F>(b & 0xFFFF0000u));
    W low = reinterpret_cast<W>(a_low);
    W high = reinterpret_cast<W>(a_high);
    round_to_bfloat16_high(low);
    round_to_bfloat16_high(high);
    store(out + at, W{(low >> 16) | (high & 0xFFFF0000u)});
  }
}

/// float16 in the low 16 bits of each lane (upper bits zero) to float32 bits. Exact, and with no
/// arithmetic on denormals (subnormal halves go through an exact int to float conversion), so
/// it does not depend on the FPU's denormal modes.
template <class W>
[[gnu::always_inline]] inline void float16_to_float_bits(W& h) noexcept {
  using S = vec<std::int32_t, sizeof(W)>;
  using F = vec<float, sizeof(W)>;
  const W sign = (h & 0x8000u) << 16;
  const W magnitude = h & 0x7FFFu;
  const S signed_magnitude = reinterpret_cast<S>(magnitude);
  W bits = (magnitude << 13) + 0x38000000u;  // exponent bias 15 -> 127
  const F subnormal = __builtin_convertvector(signed_magnitude, F) * 0x1p-24f;
  assign_where(bits, reinterpret_cast<W>(signed_magnitude < 0x400), reinterpret_cast<W>(subnormal));
  assign_where(bits, reinterpret_cast<W>(signed_magnitude >= 0x7C00),
               W{(magnitude << 13) | 0x7F800000u});
  h = bits | sign;
}

/// float32 bits to float16 in the low 16 bits of each lane, nearest-even, like float_to_float16.
template <class W>
[[gnu::always_inline]] inline void float_bits_to_float16(W& x) noexcept {
  using S = vec<std::int32_t, sizeof(W)>;
  using F = vec<float, sizeof(W)>;
  const W sign = (x >> 16) & 0x8000u;
  const W magnitude = x & 0x7FFFFFFFu;
  const S signed_magnitude = reinterpret_cast<S>(magnitude);
  W half = (magnitude - 0x38000000u + 0xFFFu + ((magnitude >> 13) & 1u)) >> 13;
  // Below 2^-14: adding 0.5 makes the FPU round at 2^-24, the subnormal half's unit; what is
  // left above 0.5 is the count of units (1024 when it rounds up to the smallest normal).
  const W subnormal = reinterpret_cast<W>(reinterpret_cast<F>(magnitude) + 0.5f) - 0x3F000000u;
  assign_where(half, reinterpret_cast<W>(signed_magnitude < 0x38800000), subnormal);
  assign_where(half, reinterpret_cast<W>(signed_magnitude >= 0x477FF000), W{} + 0x7C00u);
  assign_where(half, reinterpret_cast<W>(signed_magnitude > 0x7F800000),
               W{0x7E00u | ((magnitude >> 13) & 0x3FFu)});
  x = half | sign;
}

/// One block of float16 without F16C: two elements per 32-bit lane, as for bfloat16.
template <reduce_op Op, std::size_t VB>
[[gnu::always_inline]] inline void float16_block(std::byte* out, const std::byte* left,
                                                 const std::byte* right) noexcept {
  using W = vec<std::uint32_t, VB>;
  using F = vec<float, VB>;
  for (std::size_t at = 0; at < block_bytes; at += VB) {
    W a, b;
    load(a, left + at);
    load(b, right + at);
    W a_low = a & 0xFFFFu, a_high = a >> 16, b_low = b & 0xFFFFu, b_high = b >> 16;
    float16_to_float_bits(a_low);
    float16_to_float_bits(a_high);
    float16_to_float_bits(b_low);
    float16_to_float_bits(b_high);
    F low = reinterpret_cast<F>(a_low);
    F high = reinterpret_cast<F>(a_high);
    combine<Op, float>(low, reinterpret_cast<F>(b_low));
    combine<Op, float>(high, reinterpret_cast<F>(b_high));
    W low_bits = reinterpret_cast<W>(low);
    W high_bits = reinterpret_cast<W>(high);
    float_bits_to_float16(low_bits);
    float_bits_to_float16(high_bits);
    store(out + at, W{low_bits | (high_bits << 16)});
  }
}

/// out = left op right: Block over whole blocks, then once over the tail copied into a padded
/// block, so the tail is computed by the same code as the body. Every block reads both operands
/// before it writes, so `out` may be `left` (or `right`) itself.
template <auto Block>
[[gnu::always_inline]] inline void run_blocks(std::byte* out, const std::byte* left,
                                              const std::byte* right, std::size_t bytes) noexcept {
  std::size_t at = 0;
  for (; at + block_bytes <= bytes; at += block_bytes) Block(out + at, left + at, right + at);
  if (at == bytes) return;
  const std::size_t rest = bytes - at;
  alignas(64) std::byte a[block_bytes] = {};
  alignas(64) std::byte b[block_bytes] = {};
  std::memcpy(a, left + at, rest);
  std::memcpy(b, right + at, rest);
  Block(a, a, b);
  std::memcpy(out + at, a, rest);
}

}  // namespace vessel::collectives::kernels
