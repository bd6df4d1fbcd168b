#include "collectives/reduce.hpp"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "collectives/errc.hpp"
#include "collectives/half.hpp"
#include "collectives/reduce_kernels.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace vessel::collectives {
namespace {

/// out = left op right over `bytes` (kernels::run_blocks).
using kernel_fn = void (*)(std::byte* out, const std::byte* left, const std::byte* right,
                           std::size_t bytes) noexcept;

constexpr bool is_bitwise(reduce_op op) noexcept {
  return op == reduce_op::band || op == reduce_op::bor || op == reduce_op::bxor;
}

// 16-byte vectors: SSE2 on x86-64, NEON on AArch64.
template <class T, reduce_op Op>
void native_portable(std::byte* out, const std::byte* left, const std::byte* right,
                     std::size_t bytes) noexcept {
  kernels::run_blocks<kernels::native_block<T, Op, 16>>(out, left, right, bytes);
}

template <reduce_op Op>
void bfloat16_portable(std::byte* out, const std::byte* left, const std::byte* right,
                       std::size_t bytes) noexcept {
  kernels::run_blocks<kernels::bfloat16_block<Op, 16>>(out, left, right, bytes);
}

// Without F16C: conversions in integer vector code (reduce_kernels.hpp).
template <reduce_op Op>
void float16_portable(std::byte* out, const std::byte* left, const std::byte* right,
                      std::size_t bytes) noexcept {
  kernels::run_blocks<kernels::float16_block<Op, 16>>(out, left, right, bytes);
}

#if defined(__x86_64__)
#define VESSEL_HAVE_AVX2_KERNELS 1

// clang 14's __builtin_cpu_supports does not know "f16c": ask CPUID leaf 1 directly.
bool has_f16c() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

template <class T, reduce_op Op>
[[gnu::target("avx2")]] void native_avx2(std::byte* out, const std::byte* left,
                                         const std::byte* right, std::size_t bytes) noexcept {
  kernels::run_blocks<kernels::native_block<T, Op, 32>>(out, left, right, bytes);
}

template <reduce_op Op>
[[gnu::target("avx2")]] void bfloat16_avx2(std::byte* out, const std::byte* left,
                                           const std::byte* right, std::size_t bytes) noexcept {
  kernels::run_blocks<kernels::bfloat16_block<Op, 32>>(out, left, right, bytes);
}

/// Eight halves <-> eight floats per F16C instruction, rounding to nearest-even like
/// float_to_float16 (NaNs quieted with their upper payload, subnormals kept).
template <reduce_op Op>
[[gnu::target("avx2,f16c")]] void float16_f16c(std::byte* out, const std::byte* left,
                                               const std::byte* right, std::size_t bytes) noexcept {
  constexpr int round = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  std::size_t at = 0;
  for (; at + 32 <= bytes; at += 32) {
    __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(left + at)));
    __m256 a1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(left + at + 16)));
    const __m256 b0 =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(right + at)));
    const __m256 b1 =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(right + at + 16)));
    kernels::combine<Op, float>(a0, b0);
    kernels::combine<Op, float>(a1, b1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + at), _mm256_cvtps_ph(a0, round));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + at + 16), _mm256_cvtps_ph(a1, round));
  }
  if (at == bytes) return;
  alignas(32) std::byte a[32] = {};
  alignas(32) std::byte b[32] = {};
  const std::size_t rest = bytes - at;
  std::memcpy(a, left + at, rest);
  std::memcpy(b, right + at, rest);
  float16_f16c<Op>(a, a, b, 32);
  std::memcpy(out + at, a, rest);
}
#endif

template <reduce_op Op>
kernel_fn select(dtype t, kernel_isa isa) noexcept {
#if defined(VESSEL_HAVE_AVX2_KERNELS)
  const bool avx2 = isa == kernel_isa::avx2;
#define VESSEL_NATIVE(T) (avx2 ? native_avx2<T, Op> : native_portable<T, Op>)
#else
  (void)isa;
#define VESSEL_NATIVE(T) (native_portable<T, Op>)
#endif
  switch (t) {
    case dtype::int8: return VESSEL_NATIVE(std::int8_t);
    case dtype::uint8: return VESSEL_NATIVE(std::uint8_t);
    case dtype::int32: return VESSEL_NATIVE(std::int32_t);
    case dtype::uint32: return VESSEL_NATIVE(std::uint32_t);
    case dtype::int64: return VESSEL_NATIVE(std::int64_t);
    case dtype::uint64: return VESSEL_NATIVE(std::uint64_t);
    default: break;
  }
  if constexpr (!is_bitwise(Op)) {
    switch (t) {
      case dtype::float32: return VESSEL_NATIVE(float);
      case dtype::float64: return VESSEL_NATIVE(double);
#if defined(VESSEL_HAVE_AVX2_KERNELS)
      case dtype::bfloat16: return avx2 ? bfloat16_avx2<Op> : bfloat16_portable<Op>;
      case dtype::float16: return avx2 ? float16_f16c<Op> : float16_portable<Op>;
#else
      case dtype::bfloat16: return bfloat16_portable<Op>;
      case dtype::float16: return float16_portable<Op>;
#endif
      default: break;
    }
  }
#undef VESSEL_NATIVE
  return nullptr;
}

kernel_fn select(dtype t, reduce_op op, kernel_isa isa) noexcept {
  switch (op) {
    case reduce_op::sum: return select<reduce_op::sum>(t, isa);
    case reduce_op::prod: return select<reduce_op::prod>(t, isa);
    case reduce_op::min: return select<reduce_op::min>(t, isa);
    case reduce_op::max: return select<reduce_op::max>(t, isa);
    case reduce_op::avg: return select<reduce_op::sum>(t, isa);  // summed, divided at the end
    case reduce_op::band: return select<reduce_op::band>(t, isa);
    case reduce_op::bor: return select<reduce_op::bor>(t, isa);
    case reduce_op::bxor: return select<reduce_op::bxor>(t, isa);
  }
  return nullptr;
}

kernel_isa detect_kernel_isa() noexcept {
  if (const char* forced = std::getenv("VESSEL_REDUCE_ISA");
      forced != nullptr && std::string_view{forced} == "portable") {
    return kernel_isa::portable;
  }
  return kernel_isa_supported(kernel_isa::avx2) ? kernel_isa::avx2 : kernel_isa::portable;
}

template <class T>
void divide(std::byte* inout, std::size_t n, std::uint32_t by) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    T value;
    std::memcpy(&value, inout + i * sizeof(T), sizeof(T));
    if constexpr (std::is_signed_v<T> && std::is_integral_v<T>) {
      // In 64 bits: the count may not fit T (int8 with 200 contributors).
      value = static_cast<T>(std::int64_t{value} / std::int64_t{by});
    } else if constexpr (std::is_integral_v<T>) {
      value = static_cast<T>(std::uint64_t{value} / by);
    } else {
      value = static_cast<T>(value / static_cast<T>(by));
    }
    std::memcpy(inout + i * sizeof(T), &value, sizeof(T));
  }
}

template <float (*Widen)(std::uint16_t), std::uint16_t (*Narrow)(float)>
void divide_half(std::byte* inout, std::size_t n, std::uint32_t by) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t value;
    std::memcpy(&value, inout + 2 * i, 2);
    value = Narrow(Widen(value) / static_cast<float>(by));
    std::memcpy(inout + 2 * i, &value, 2);
  }
}

}  // namespace

bool kernel_isa_supported(kernel_isa isa) noexcept {
  switch (isa) {
    case kernel_isa::portable: return true;
    case kernel_isa::avx2: {
#if defined(VESSEL_HAVE_AVX2_KERNELS)
      // Asked once: CPUID traps to the hypervisor on a VM (microseconds), and every
      // reduce_into checks its kernel set.
      static const bool supported = __builtin_cpu_supports("avx2") && has_f16c();
      return supported;
#else
      return false;
#endif
    }
  }
  return false;
}

kernel_isa default_kernel_isa() noexcept {
  static const kernel_isa chosen = detect_kernel_isa();
  return chosen;
}

std::string_view to_string(kernel_isa isa) noexcept {
  switch (isa) {
    case kernel_isa::portable: return "portable";
    case kernel_isa::avx2: return "avx2";
  }
  return "unknown";
}

result<void> reduce_into(std::span<std::byte> inout, std::span<const std::byte> in, dtype t,
                         reduce_op op, kernel_isa isa) noexcept {
  if (size_of(t) == 0) return errc::unsupported_type;
  if (!kernel_isa_supported(isa)) return errc::unsupported_isa;
  const kernel_fn kernel = select(t, op, isa);
  if (kernel == nullptr) return errc::unsupported_op;
  if (inout.size() != in.size() || inout.size() % size_of(t) != 0) return errc::size_mismatch;
  if (!inout.empty()) kernel(inout.data(), inout.data(), in.data(), inout.size());
  return outcome::success();
}

result<void> reduce_into(std::span<std::byte> inout, std::span<const std::byte> in, dtype t,
                         reduce_op op) noexcept {
  return reduce_into(inout, in, t, op, default_kernel_isa());
}

result<void> reduce_to(std::span<std::byte> out, std::span<const std::byte> a,
                       std::span<const std::byte> b, dtype t, reduce_op op) noexcept {
  return reduce_to(out, a, b, t, op, default_kernel_isa());
}

result<void> reduce_to(std::span<std::byte> out, std::span<const std::byte> a,
                       std::span<const std::byte> b, dtype t, reduce_op op,
                       kernel_isa isa) noexcept {
  if (size_of(t) == 0) return errc::unsupported_type;
  if (!kernel_isa_supported(isa)) return errc::unsupported_isa;
  const kernel_fn kernel = select(t, op, isa);
  if (kernel == nullptr) return errc::unsupported_op;
  if (out.size() != a.size() || out.size() != b.size() || out.size() % size_of(t) != 0) {
    return errc::size_mismatch;
  }
  // One pass with three operands. Copying `a` into `out` first, even in L1-sized pieces, ran at
  // less than half this rate (bench_collectives_reduce, BM_reduce_to_f32_sum).
  if (!out.empty()) kernel(out.data(), a.data(), b.data(), out.size());
  return outcome::success();
}

result<void> finish_average(std::span<std::byte> inout, dtype t,
                            std::uint32_t contributors) noexcept {
  if (size_of(t) == 0) return errc::unsupported_type;
  if (contributors == 0) return errc::invalid_argument;
  if (inout.size() % size_of(t) != 0) return errc::size_mismatch;
  const std::size_t n = inout.size() / size_of(t);
  std::byte* out = inout.data();
  switch (t) {
    case dtype::int8: divide<std::int8_t>(out, n, contributors); break;
    case dtype::uint8: divide<std::uint8_t>(out, n, contributors); break;
    case dtype::int32: divide<std::int32_t>(out, n, contributors); break;
    case dtype::uint32: divide<std::uint32_t>(out, n, contributors); break;
    case dtype::int64: divide<std::int64_t>(out, n, contributors); break;
    case dtype::uint64: divide<std::uint64_t>(out, n, contributors); break;
    case dtype::float32: divide<float>(out, n, contributors); break;
    case dtype::float64: divide<double>(out, n, contributors); break;
    case dtype::float16:
      divide_half<float16_to_float, float_to_float16>(out, n, contributors);
      break;
    case dtype::bfloat16:
      divide_half<bfloat16_to_float, float_to_bfloat16>(out, n, contributors);
      break;
  }
  return outcome::success();
}

}  // namespace vessel::collectives
