#include "wire/copy_bytes.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vessel::wire::detail {

#if defined(__x86_64__)
namespace {

__attribute__((target("avx2"))) void copy_avx2(std::byte* dst, const std::byte* src,
                                               std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  std::memcpy(dst + i, src + i, n - i);  // < 128 bytes: glibc's vector path, no rep movsb
}

void copy_sse2(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
}

bool has_avx2() noexcept {
  static const bool yes = [] {
    __builtin_cpu_init();  // we may run before the constructor that initialises the CPU model
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}

}  // namespace

void copy_by_vectors(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  if (has_avx2()) {
    copy_avx2(dst, src, n);
  } else {
    copy_sse2(dst, src, n);
  }
}

bool rep_movsb_slow_near_source() noexcept {
  static const bool slow = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return slow;
}
#else
void copy_by_vectors(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  std::memcpy(dst, src, n);
}

bool rep_movsb_slow_near_source() noexcept { return false; }
#endif

}  // namespace vessel::wire::detail
