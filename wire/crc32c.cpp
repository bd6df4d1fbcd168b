#include "wire/crc32c.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#define VESSEL_CRC32C_X86 1
#endif

namespace vessel::wire {
namespace {

// Reflected polynomial: bit i holds the coefficient of x^(31-i), so x^0 is 0x80000000 and a
// multiplication by x is a right shift that folds x^32 back in as the polynomial's low terms.
constexpr std::uint32_t k_poly = 0x82F63B78u;

constexpr std::uint32_t times_x(std::uint32_t a) noexcept {
  return (a & 1u) != 0 ? (a >> 1) ^ k_poly : a >> 1;
}

// a * b mod P in the reflected representation (Mark Adler's multmodp, crc32c.c).
constexpr std::uint32_t multiply_mod_p(std::uint32_t a, std::uint32_t b) noexcept {
  std::uint32_t product = 0;
  for (int degree = 0; degree < 32; ++degree) {
    if ((a & (0x80000000u >> degree)) != 0) product ^= b;
    b = times_x(b);
  }
  return product;
}

constexpr std::uint32_t x_to_the(std::uint64_t exponent) noexcept {
  std::uint32_t result = 0x80000000u;  // x^0
  std::uint32_t square = 0x40000000u;  // x^1, then x^2, x^4, ...
  for (; exponent != 0; exponent >>= 1) {
    if ((exponent & 1u) != 0) result = multiply_mod_p(result, square);
    square = multiply_mod_p(square, square);
  }
  return result;
}

// ---- portable: slicing-by-8 (Intel, "A Systematic Approach to Building High Performance
// Software-based CRC Generators", 2005), 8 KiB of tables built at compile time.

using slice_tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr slice_tables make_slice_tables() noexcept {
  slice_tables t{};
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int bit = 0; bit < 8; ++bit) c = times_x(c);
    t[0][n] = c;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t n = 0; n < 256; ++n) t[k][n] = (t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xFFu];
  }
  return t;
}

constexpr slice_tables k_tables = make_slice_tables();
static_assert(k_tables[0][1] == 0xF26B8303u, "first entry of the published CRC32C byte table");

std::uint64_t load_le64(const std::byte* p) noexcept {
  std::uint64_t word;
  std::memcpy(&word, p, sizeof word);
  if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap64(word);
  return word;
}

std::uint32_t extend_table(std::uint32_t crc, const std::byte* p, std::size_t n) noexcept {
  std::uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    const std::uint64_t w = load_le64(p) ^ c;
    c = k_tables[7][w & 0xFFu] ^ k_tables[6][(w >> 8) & 0xFFu] ^ k_tables[5][(w >> 16) & 0xFFu] ^
        k_tables[4][(w >> 24) & 0xFFu] ^ k_tables[3][(w >> 32) & 0xFFu] ^
        k_tables[2][(w >> 40) & 0xFFu] ^ k_tables[1][(w >> 48) & 0xFFu] ^ k_tables[0][w >> 56];
  }
  for (; n != 0; --n, ++p) c = (c >> 8) ^ k_tables[0][(c ^ std::to_integer<std::uint32_t>(*p)) & 0xFFu];
  return ~c;
}

#if defined(VESSEL_CRC32C_X86)

// ---- hardware: `crc32q` has a latency of 3 cycles and a throughput of 1 per cycle, so one
// dependency chain reaches a third of the instruction's speed. Like Linux (crc32c-pcl-intel-asm_64.S)
// and Adler's crc32c.c we run three chains over three adjacent stretches of L bytes, then fold the
// first two into the third: crc(A|B|C) = crc(A)*x^(16L) + crc(B)*x^(8L) + crc(C) mod P.
//
// The shift uses PCLMULQDQ: in the reflected representation clmul(a, k) holds x*a*k as a 64-bit
// message, and `crc32q` from state 0 multiplies a 64-bit message by x^32, so
// crc32q(0, clmul(a, x^(8L-33))) == a*x^(8L) mod P. Both products share one `crc32q`.

constexpr std::size_t k_max_stride_words = 1024;  // L up to 8 KiB: the fold costs ~1% of a block
constexpr std::size_t k_min_stride_words = 4;     // below 3*32 bytes one chain is as fast

struct fold_constants {
  std::uint32_t by_one_stride;   // x^(8L-33) mod P
  std::uint32_t by_two_strides;  // x^(16L-33) mod P
};

constexpr std::array<fold_constants, k_max_stride_words> make_fold_constants() noexcept {
  std::array<fold_constants, k_max_stride_words> k{};
  const std::uint32_t x64 = x_to_the(64);
  const std::uint32_t x128 = x_to_the(128);
  std::uint32_t one = x_to_the(64 - 33);
  std::uint32_t two = x_to_the(128 - 33);
  for (auto& entry : k) {  // entry w-1 is for L = 8w bytes
    entry = {one, two};
    one = multiply_mod_p(one, x64);
    two = multiply_mod_p(two, x128);
  }
  return k;
}

constexpr std::array<fold_constants, k_max_stride_words> k_fold = make_fold_constants();

__attribute__((target("sse4.2"))) std::uint64_t extend_serial_sse42(std::uint64_t c,
                                                                      const std::byte* p,
                                                                      std::size_t n) noexcept {
  for (; n >= 8; n -= 8, p += 8) c = _mm_crc32_u64(c, load_le64(p));
  for (; n != 0; --n, ++p) {
    c = _mm_crc32_u8(static_cast<std::uint32_t>(c), std::to_integer<std::uint8_t>(*p));
  }
  return c;
}

__attribute__((target("sse4.2"))) std::uint32_t extend_sse42_serial(std::uint32_t crc,
                                                                      const std::byte* p,
                                                                      std::size_t n) noexcept {
  return ~static_cast<std::uint32_t>(extend_serial_sse42(~crc, p, n));
}

__attribute__((target("sse4.2,pclmul"))) std::uint64_t shift_and_fold(std::uint64_t a,
                                                                        std::uint32_t ka,
                                                                        std::uint64_t b,
                                                                        std::uint32_t kb) noexcept {
  const __m128i pa = _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<long long>(a)),
                                          _mm_cvtsi32_si128(static_cast<int>(ka)), 0x00);
  const __m128i pb = _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<long long>(b)),
                                          _mm_cvtsi32_si128(static_cast<int>(kb)), 0x00);
  return _mm_crc32_u64(0, static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm_xor_si128(pa, pb))));
}

__attribute__((target("sse4.2,pclmul"))) std::uint32_t extend_sse42_3way(std::uint32_t crc,
                                                                           const std::byte* p,
                                                                           std::size_t n) noexcept {
  std::uint64_t c0 = ~crc;
  while (n >= 3 * 8 * k_min_stride_words) {
    const std::size_t words = std::min(n / 24, k_max_stride_words);
    const std::size_t stride = words * 8;
    std::uint64_t c1 = 0;
    std::uint64_t c2 = 0;
    for (const std::byte* end = p + stride; p != end; p += 8) {
      c0 = _mm_crc32_u64(c0, load_le64(p));
      c1 = _mm_crc32_u64(c1, load_le64(p + stride));
      c2 = _mm_crc32_u64(c2, load_le64(p + 2 * stride));
    }
    const fold_constants& k = k_fold[words - 1];
    c0 = c2 ^ shift_and_fold(c0, k.by_two_strides, c1, k.by_one_stride);
    p += 2 * stride;
    n -= 3 * stride;
  }
  return ~static_cast<std::uint32_t>(extend_serial_sse42(c0, p, n));
}

#endif  // VESSEL_CRC32C_X86

using extend_fn = std::uint32_t (*)(std::uint32_t, const std::byte*, std::size_t) noexcept;

struct implementation {
  extend_fn extend;
  std::string_view name;
};

implementation select_implementation() noexcept {
#if defined(VESSEL_CRC32C_X86)
  // Needed when this runs before the compiler's own CPU-model constructor (static initialisers).
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) {
    if (__builtin_cpu_supports("pclmul")) return {extend_sse42_3way, "sse4.2"};
    return {extend_sse42_serial, "sse4.2-serial"};
  }
#endif
  return {extend_table, "table"};
}

// A function-local static rather than a global so that callers in other static initialisers
// never see it unset.
const implementation& active() noexcept {
  static const implementation chosen = select_implementation();
  return chosen;
}

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> data) noexcept { return crc32c_extend(0, data); }

std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> data) noexcept {
  return active().extend(crc, data.data(), data.size());
}

std::string_view crc32c_implementation() noexcept { return active().name; }

std::uint32_t crc32c_extend_table(std::uint32_t crc, std::span<const std::byte> data) noexcept {
  return extend_table(crc, data.data(), data.size());
}

bool crc32c_sse42_supported() noexcept {
#if defined(VESSEL_CRC32C_X86)
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
#else
  return false;
#endif
}

std::uint32_t crc32c_extend_sse42(std::uint32_t crc, std::span<const std::byte> data) noexcept {
#if defined(VESSEL_CRC32C_X86)
  return extend_sse42_3way(crc, data.data(), data.size());
#else
  return extend_table(crc, data.data(), data.size());
#endif
}

}  // namespace vessel::wire
