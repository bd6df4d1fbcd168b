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

/// Bytes of each operand handled per loop iteration: two 64-byte vectors (four AVX2 registers,
/// eight SSE2 ones) keep enough loads in flight to stream at memory bandwidth.
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
  requires(std::is_integral_v<T> && Op != reduce_op::min && Op != reduce_op::max)
struct lane<T, Op> {
  using type = std::make_unsigned_t<T>;
};
template <class T, reduce_op Op>
using lane_t = typename lane<T, Op>::type;

/// a = a op b, lane by lane; V is a vector of Lane (or Lane itself).
template <reduce_op Op, class Lane, class V>
[[gnu::always_inline]] inline void combine(V& a, const V& b) noexcept {
  if constexpr (Op == reduce_op::sum || Op == reduce_op::avg) {
    a = a + b;
  } else if constexpr (Op == reduce_op::prod) {
    a = a * b;
  } else if constexpr (Op == reduce_op::min || Op == reduce_op::max) {
    if constexpr (Op == reduce_op::min) {
      a = b < a ? b : a;  // equal operands (+0, -0) keep a
    } else {
      a = a < b ? b : a;
    }
    // NaN propagates from either side; a NaN a already survived the compare above.
    if constexpr (std::is_floating_point_v<Lane>) a = b != b ? b : a;
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

/// One block of a natively supported type.
template <class T, reduce_op Op>
[[gnu::always_inline]] inline void native_block(std::byte* inout, const std::byte* in) noexcept {
  using Lane = lane_t<T, Op>;
  using V = vec<Lane, block_bytes / 2>;
  V a0, a1, b0, b1;
  load(a0, inout);
  load(a1, inout + sizeof(V));
  load(b0, in);
  load(b1, in + sizeof(V));
  combine<Op, Lane>(a0, b0);
  combine<Op, Lane>(a1, b1);
  store(inout, a0);
  store(inout + sizeof(V), a1);
}

/// One block of bfloat16: widened to float32 (a shift), combined, rounded to nearest-even.
template <reduce_op Op>
[[gnu::always_inline]] inline void bfloat16_block(std::byte* inout, const std::byte* in) noexcept {
  using H = vec<std::uint16_t, block_bytes / 2>;
  using W = vec<std::uint32_t, block_bytes>;
  using F = vec<float, block_bytes>;
  for (std::size_t half = 0; half < 2; ++half) {
    const std::size_t at = half * sizeof(H);
    H ha, hb;
    load(ha, inout + at);
    load(hb, in + at);
    F a = reinterpret_cast<F>(__builtin_convertvector(ha, W) << 16);
    const F b = reinterpret_cast<F>(__builtin_convertvector(hb, W) << 16);
    combine<Op, float>(a, b);
    const W bits = reinterpret_cast<W>(a);
    const W rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    const W quiet_nan = (bits >> 16) | 0x40u;
    const W narrowed = (bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded;
    store(inout + at, __builtin_convertvector(narrowed, H));
  }
}

/// Runs Block over whole blocks, then once over the tail copied into a padded block, so the tail
/// is computed by the same code as the body.
template <auto Block>
[[gnu::always_inline]] inline void run_blocks(std::byte* inout, const std::byte* in,
                                              std::size_t bytes) noexcept {
  std::size_t at = 0;
  for (; at + block_bytes <= bytes; at += block_bytes) Block(inout + at, in + at);
  if (at == bytes) return;
  const std::size_t rest = bytes - at;
  alignas(64) std::byte a[block_bytes] = {};
  alignas(64) std::byte b[block_bytes] = {};
  std::memcpy(a, inout + at, rest);
  std::memcpy(b, in + at, rest);
  Block(a, b);
  std::memcpy(inout + at, a, rest);
}

}  // namespace vessel::collectives::kernels
