// reduce_into/finish_average against a scalar reference written independently of the kernels:
// integers in 64-bit arithmetic, float32/float64 in their own type, float16/bfloat16 decoded to
// double, combined exactly (or nearly: double has room to spare) and rounded to nearest-even by
// ldexp/nearbyint. Converting to float32 and rounding back once is correctly rounded for these
// operations (float32 has at least 2p+2 bits for both 16-bit formats), so the bits must agree.

#include "collectives/reduce.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collectives/errc.hpp"
#include "collectives/half.hpp"

namespace vessel::collectives {
namespace {

constexpr dtype all_types[] = {dtype::int8,    dtype::uint8,  dtype::int32,   dtype::uint32,
                               dtype::int64,   dtype::uint64, dtype::float16, dtype::bfloat16,
                               dtype::float32, dtype::float64};
constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::prod, reduce_op::min, reduce_op::max,
                                 reduce_op::avg, reduce_op::band, reduce_op::bor, reduce_op::bxor};

// ---- reference ---------------------------------------------------------------------------------

struct half_format {
  int mantissa_bits;  // stored fraction bits
  int exponent_bits;
};
constexpr half_format f16_format{10, 5};
constexpr half_format bf16_format{7, 8};

double decode(std::uint16_t bits, half_format f) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const bool negative = (bits >> 15) != 0;
  const int exponent = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  double value;
  if (exponent == (1 << f.exponent_bits) - 1) {
    value = mantissa == 0 ? std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    value = std::ldexp(mantissa, 1 - bias - f.mantissa_bits);
  } else {
    value = std::ldexp(mantissa + (1 << f.mantissa_bits), exponent - bias - f.mantissa_bits);
  }
  return negative ? -value : value;
}

/// Round to nearest-even by scaling to the target's ulp and using nearbyint (FE_TONEAREST).
std::uint16_t encode(double value, half_format f) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const int max_exponent = (1 << f.exponent_bits) - 2;  // biased, finite
  const auto sign = static_cast<std::uint16_t>(std::signbit(value) ? 0x8000 : 0);
  const auto inf_bits = static_cast<std::uint16_t>(((1 << f.exponent_bits) - 1) << f.mantissa_bits);
  if (std::isnan(value)) return static_cast<std::uint16_t>(inf_bits | 1);  // any NaN
  const double magnitude = std::fabs(value);
  if (std::isinf(magnitude)) return sign | inf_bits;
  int exponent;  // magnitude = m * 2^exponent, m in [0.5, 1)
  std::frexp(magnitude, &exponent);
  int unbiased = exponent - 1;
  if (magnitude == 0 || unbiased < 1 - bias) unbiased = 1 - bias;  // subnormal grid
  const int ulp_exponent = unbiased - f.mantissa_bits;
  double units = std::nearbyint(std::ldexp(magnitude, -ulp_exponent));
  if (units >= std::ldexp(1.0, f.mantissa_bits + 1)) {  // rounded up to the next binade
    units /= 2;
    ++unbiased;
  }
  const int implicit = 1 << f.mantissa_bits;
  if (units < implicit) return sign | static_cast<std::uint16_t>(units);  // subnormal or zero
  const int biased = unbiased + bias;
  if (biased > max_exponent) return sign | inf_bits;
  return sign | static_cast<std::uint16_t>((biased << f.mantissa_bits) |
                                           (static_cast<int>(units) - implicit));
}

template <class T>
T reference_float(T a, T b, reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg: return a + b;
    case reduce_op::prod: return a * b;
    case reduce_op::min:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      return b < a ? b : a;
    case reduce_op::max:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      return a < b ? b : a;
    default: ADD_FAILURE() << "bitwise op on a float"; return a;
  }
}

template <class T>
T reference_integer(T a, T b, reduce_op op) {
  const auto wa = static_cast<std::uint64_t>(a);
  const auto wb = static_cast<std::uint64_t>(b);
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg: return static_cast<T>(wa + wb);
    case reduce_op::prod: return static_cast<T>(wa * wb);
    case reduce_op::min: return std::min(a, b);
    case reduce_op::max: return std::max(a, b);
    case reduce_op::band: return static_cast<T>(wa & wb);
    case reduce_op::bor: return static_cast<T>(wa | wb);
    case reduce_op::bxor: return static_cast<T>(wa ^ wb);
  }
  return a;
}

template <class T>
T get(const std::byte* p, std::size_t i) {
  T value;
  std::memcpy(&value, p + i * sizeof(T), sizeof(T));
  return value;
}

/// Checks element i of `got` (the kernel's inout after the call) against a op b.
::testing::AssertionResult element_matches(dtype t, reduce_op op, const std::byte* a,
                                           const std::byte* b, const std::byte* got,
                                           std::size_t i) {
  auto fail = [&](auto expected, auto actual) {
    return ::testing::AssertionFailure() << to_string(t) << " " << to_string(op) << " element " << i
                                         << ": expected " << +expected << " got " << +actual;
  };
  auto same_float = [](auto x, auto y) {
    return (std::isnan(x) && std::isnan(y)) || std::memcmp(&x, &y, sizeof x) == 0;
  };
  switch (t) {
#define VESSEL_INTEGER_CASE(D, T)                                          \
  case dtype::D: {                                                         \
    const T expected = reference_integer(get<T>(a, i), get<T>(b, i), op);  \
    if (get<T>(got, i) != expected) return fail(expected, get<T>(got, i)); \
    break;                                                                 \
  }
    VESSEL_INTEGER_CASE(int8, std::int8_t)
    VESSEL_INTEGER_CASE(uint8, std::uint8_t)
    VESSEL_INTEGER_CASE(int32, std::int32_t)
    VESSEL_INTEGER_CASE(uint32, std::uint32_t)
    VESSEL_INTEGER_CASE(int64, std::int64_t)
    VESSEL_INTEGER_CASE(uint64, std::uint64_t)
#undef VESSEL_INTEGER_CASE
    case dtype::float32: {
      const float expected = reference_float(get<float>(a, i), get<float>(b, i), op);
      if (!same_float(expected, get<float>(got, i))) return fail(expected, get<float>(got, i));
      break;
    }
    case dtype::float64: {
      const double expected = reference_float(get<double>(a, i), get<double>(b, i), op);
      if (!same_float(expected, get<double>(got, i))) return fail(expected, get<double>(got, i));
      break;
    }
    case dtype::float16:
    case dtype::bfloat16: {
      const half_format f = t == dtype::float16 ? f16_format : bf16_format;
      const double expected = reference_float(decode(get<std::uint16_t>(a, i), f),
                                              decode(get<std::uint16_t>(b, i), f), op);
      const std::uint16_t actual = get<std::uint16_t>(got, i);
      const std::uint16_t want = encode(expected, f);
      const bool both_nan = std::isnan(expected) && std::isnan(decode(actual, f));
      if (!both_nan && actual != want) return fail(want, actual);
      break;
    }
  }
  return ::testing::AssertionSuccess();
}

/// Random bit patterns: every value class (NaN, infinities, subnormals, -0) turns up for the
/// 16-bit floats; for float32/float64 half the elements are small integers so that sums and
/// products are not all overflow or noise.
std::vector<std::byte> random_elements(dtype t, std::size_t count, std::mt19937_64& rng) {
  std::vector<std::byte> out(count * size_of(t));
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t bits = rng();
    if ((t == dtype::float32 || t == dtype::float64) && (bits & 1) != 0) {
      const auto small = static_cast<int>((bits >> 8) % 201) - 100;
      if (t == dtype::float32) {
        bits = std::bit_cast<std::uint32_t>(static_cast<float>(small) / 4);
      } else {
        bits = std::bit_cast<std::uint64_t>(static_cast<double>(small) / 4);
      }
    }
    std::memcpy(out.data() + i * size_of(t), &bits, size_of(t));  // little-endian low bytes
  }
  return out;
}

std::vector<kernel_isa> supported_isas() {
  std::vector<kernel_isa> isas;
  for (kernel_isa isa : {kernel_isa::portable, kernel_isa::avx2}) {
    if (kernel_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

/// Reduces `count` random elements at byte offsets (misalignment) and checks every element.
void check_against_reference(dtype t, reduce_op op, std::size_t count, std::size_t misalign_a,
                             std::size_t misalign_b, kernel_isa isa, std::mt19937_64& rng) {
  const std::size_t bytes = count * size_of(t);
  const auto a = random_elements(t, count, rng);
  const auto b = random_elements(t, count, rng);
  std::vector<std::byte> inout_storage(bytes + misalign_a + 16);
  std::vector<std::byte> in_storage(bytes + misalign_b + 16);
  std::byte* inout = inout_storage.data() + misalign_a;
  std::byte* in = in_storage.data() + misalign_b;
  if (bytes != 0) {
    std::memcpy(inout, a.data(), bytes);
    std::memcpy(in, b.data(), bytes);
  }
  // Guard bytes after the spans must survive (tails are handled through a padded block).
  std::memset(inout + bytes, 0x5A, 16);
  const auto r = reduce_into({inout, bytes}, {in, bytes}, t, op, isa);
  ASSERT_TRUE(r) << r.error().message();
  for (std::size_t i = 0; i < count; ++i) {
    // Only a failure builds the message (a million elements under ASan).
    if (element_matches(t, op, a.data(), b.data(), inout, i)) continue;
    ASSERT_TRUE(element_matches(t, op, a.data(), b.data(), inout, i))
        << "isa " << to_string(isa) << " count " << count << " misalign " << misalign_a << "/"
        << misalign_b;
  }
  for (std::size_t g = 0; g < 16; ++g) ASSERT_EQ(inout[bytes + g], std::byte{0x5A});
  if (bytes != 0) {
    ASSERT_EQ(std::memcmp(in, b.data(), bytes), 0) << "the input operand was written";
  }
}

// ---- every (type, op, isa) against the reference --------------------------------------------

TEST(CollectivesReduce, EveryTypeAndOpMatchesScalarReference) {
  std::mt19937_64 rng(20261129);
  // Around the 128-byte block and the 32-element F16C step, for every element size.
  const std::size_t counts[] = {0, 1, 7, 15, 16, 17, 33, 63, 64, 65, 129, 1000};
  for (kernel_isa isa : supported_isas()) {
    for (dtype t : all_types) {
      for (reduce_op op : all_ops) {
        if (!supports(t, op)) continue;
        for (std::size_t count : counts) {
          check_against_reference(t, op, count, 0, 0, isa, rng);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(CollectivesReduce, LargeOddLengthMatchesReference) {
  // One op per type, alternating isas: the small lengths above cover every combination.
  std::mt19937_64 rng(7);
  const auto isas = supported_isas();
  std::size_t turn = 0;
  for (dtype t : all_types) {
    const reduce_op op = is_integer(t) ? reduce_op::bxor : reduce_op::sum;
    check_against_reference(t, op, 1000003, 3, 1, isas[turn++ % isas.size()], rng);
    if (HasFatalFailure()) return;
  }
}

TEST(CollectivesReduce, MisalignedSpansMatchReference) {
  std::mt19937_64 rng(99);
  for (kernel_isa isa : supported_isas()) {
    for (dtype t : all_types) {
      for (std::size_t shift_a : {1u, 2u, 3u, 5u, 7u}) {
        for (std::size_t shift_b : {0u, 1u, 6u}) {
          check_against_reference(t, reduce_op::sum, 333, shift_a, shift_b, isa, rng);
          check_against_reference(t, reduce_op::min, 70, shift_a, shift_b, isa, rng);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(CollectivesReduce, InPlaceOperandAliasingInout) {
  std::mt19937_64 rng(5);
  for (kernel_isa isa : supported_isas()) {
    for (dtype t : all_types) {
      for (reduce_op op : all_ops) {
        if (!supports(t, op)) continue;
        const auto original = random_elements(t, 301, rng);
        auto buffer = original;
        ASSERT_TRUE(reduce_into(buffer, buffer, t, op, isa));
        for (std::size_t i = 0; i < 301; ++i) {
          ASSERT_TRUE(element_matches(t, op, original.data(), original.data(), buffer.data(), i))
              << to_string(isa);
        }
      }
    }
  }
}

// ---- reduce_to: out = a op b -------------------------------------------------------------------

TEST(CollectivesReduce, ReduceToEqualsCopyThenReduceInto) {
  std::mt19937_64 rng(11);
  // Around the kernels' 128-byte blocks (a tail alone, whole blocks, blocks and a tail) and long.
  const std::size_t byte_counts[] = {0, 8, 24, 128, 136, 1000, 8192, 8200, 70000};
  for (dtype t : all_types) {
    for (reduce_op op : all_ops) {
      if (!supports(t, op)) continue;
      for (std::size_t bytes : byte_counts) {
        const std::size_t count = bytes / size_of(t);
        const auto a = random_elements(t, count, rng);
        const auto b = random_elements(t, count, rng);
        auto expected = a;
        ASSERT_TRUE(reduce_into(expected, b, t, op));
        std::vector<std::byte> out(a.size(), std::byte{0x5A});
        ASSERT_TRUE(reduce_to(out, a, b, t, op));
        ASSERT_EQ(out, expected) << to_string(t) << " " << to_string(op) << " " << count;
        // Each instruction set's three-operand kernels, not only the default's (against the
        // same set's reduce_into: which NaN payload survives may differ between sets).
        for (kernel_isa isa : supported_isas()) {
          auto expected_by_isa = a;
          ASSERT_TRUE(reduce_into(expected_by_isa, b, t, op, isa));
          std::vector<std::byte> by_isa(a.size(), std::byte{0x5A});
          ASSERT_TRUE(reduce_to(by_isa, a, b, t, op, isa));
          ASSERT_EQ(by_isa, expected_by_isa)
              << to_string(t) << " " << to_string(op) << " " << count << " " << to_string(isa);
        }
        // `out` may be `a` itself (an in-place collective reduces its input where it lies).
        auto in_place = a;
        ASSERT_TRUE(reduce_to(in_place, in_place, b, t, op));
        ASSERT_EQ(in_place, expected) << to_string(t) << " " << to_string(op) << " " << count;
      }
    }
  }
}

TEST(CollectivesReduce, ReduceToFromMisalignedOperandsMatchesReference) {
  // Each operand at its own offset from alignment: the kernel loads and stores unaligned.
  std::mt19937_64 rng(12);
  for (dtype t : all_types) {
    const std::size_t count = 1031;
    const std::size_t bytes = count * size_of(t);
    const auto a = random_elements(t, count, rng);
    const auto b = random_elements(t, count, rng);
    auto expected = a;
    ASSERT_TRUE(reduce_into(expected, b, t, reduce_op::sum));
    std::vector<std::byte> a_store(bytes + 64), b_store(bytes + 64), out_store(bytes + 64);
    const std::span<std::byte> a_at{a_store.data() + 3, bytes};
    const std::span<std::byte> b_at{b_store.data() + 17, bytes};
    const std::span<std::byte> out_at{out_store.data() + 33, bytes};
    std::copy(a.begin(), a.end(), a_at.begin());
    std::copy(b.begin(), b.end(), b_at.begin());
    ASSERT_TRUE(reduce_to(out_at, a_at, b_at, t, reduce_op::sum));
    EXPECT_TRUE(std::equal(out_at.begin(), out_at.end(), expected.begin())) << to_string(t);
    EXPECT_TRUE(std::all_of(out_store.begin(), out_store.begin() + 33,
                            [](std::byte x) { return x == std::byte{0}; }));
    EXPECT_TRUE(std::all_of(out_store.begin() + 33 + static_cast<std::ptrdiff_t>(bytes),
                            out_store.end(), [](std::byte x) { return x == std::byte{0}; }))
        << "wrote past the output: " << to_string(t);
  }
}

TEST(CollectivesReduce, ReduceToRefusesBadCallsBeforeWritingAnything) {
  const std::vector<std::byte> untouched(16, std::byte{7});
  std::vector<std::byte> out = untouched, a(16, std::byte{1}), b(16, std::byte{2}), b12(12), a6(6),
                         b6(6), out6(6, std::byte{7});
  auto r = reduce_to(out, a, b, dtype::float32, reduce_op::band);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::unsupported_op);
  r = reduce_to(out, a, b, static_cast<dtype>(42), reduce_op::sum);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::unsupported_type);
  r = reduce_to(out, a, b12, dtype::int32, reduce_op::sum);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::size_mismatch);
  r = reduce_to(out, a, b, dtype::int32, reduce_op::sum, static_cast<kernel_isa>(42));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::unsupported_isa);
  EXPECT_EQ(out, untouched);
  r = reduce_to(out6, a6, b6, dtype::float32, reduce_op::sum);  // not whole elements
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::size_mismatch);
  EXPECT_EQ(out6, std::vector<std::byte>(6, std::byte{7}));
}

bool is_nan(dtype t, const std::byte* p) {
  switch (t) {
    case dtype::float16: return std::isnan(decode(get<std::uint16_t>(p, 0), f16_format));
    case dtype::bfloat16: return std::isnan(decode(get<std::uint16_t>(p, 0), bf16_format));
    case dtype::float32: return std::isnan(get<float>(p, 0));
    case dtype::float64: return std::isnan(get<double>(p, 0));
    default: return false;
  }
}

TEST(CollectivesReduce, IsasAgreeBitForBit) {
  std::mt19937_64 rng(11);
  const auto isas = supported_isas();
  if (isas.size() < 2) GTEST_SKIP() << "this CPU has only the portable kernels";
  for (dtype t : all_types) {
    for (reduce_op op : all_ops) {
      if (!supports(t, op)) continue;
      const auto a = random_elements(t, 4099, rng);
      const auto b = random_elements(t, 4099, rng);
      auto portable = a;
      auto fast = a;
      ASSERT_TRUE(reduce_into(portable, b, t, op, kernel_isa::portable));
      ASSERT_TRUE(reduce_into(fast, b, t, op, isas.back()));
      // Bit for bit, except that which NaN payload survives a + b is the compiler's choice.
      const std::size_t width = size_of(t);
      for (std::size_t at = 0; at < a.size(); at += width) {
        if (std::memcmp(portable.data() + at, fast.data() + at, width) == 0) continue;
        ASSERT_TRUE(is_nan(t, portable.data() + at) && is_nan(t, fast.data() + at))
            << to_string(t) << " " << to_string(op) << " element " << at / width;
      }
    }
  }
}

// ---- float16/bfloat16 rounding corners -------------------------------------------------------

std::uint16_t reduce_pair(dtype t, reduce_op op, std::uint16_t a, std::uint16_t b, kernel_isa isa) {
  std::byte x[2], y[2];
  std::memcpy(x, &a, 2);
  std::memcpy(y, &b, 2);
  EXPECT_TRUE(reduce_into(x, y, t, op, isa));
  std::uint16_t out;
  std::memcpy(&out, x, 2);
  return out;
}

TEST(CollectivesReduce, Float16RoundingCorners) {
  for (kernel_isa isa : supported_isas()) {
    SCOPED_TRACE(std::string{to_string(isa)});
    const auto sum = [&](std::uint16_t a, std::uint16_t b) {
      return reduce_pair(dtype::float16, reduce_op::sum, a, b, isa);
    };
    // 2048 + 1 is a tie between 2048 and 2050 (ulp 2): even mantissa 2048 wins; 2050 + 1 -> 2052.
    EXPECT_EQ(sum(0x6800, 0x3C00), 0x6800);
    EXPECT_EQ(sum(0x6801, 0x3C00), 0x6802);
    // 65504 (largest) + 16 = 65520, the tie with 65536: to even, i.e. infinity; + 8 stays.
    EXPECT_EQ(sum(0x7BFF, 0x4C00), 0x7C00);
    EXPECT_EQ(sum(0x7BFF, 0x4800), 0x7BFF);
    EXPECT_EQ(sum(0xFBFF, 0xCC00), 0xFC00);
    // Subnormals add exactly; the largest subnormal plus the smallest is the smallest normal.
    EXPECT_EQ(sum(0x0001, 0x0001), 0x0002);
    EXPECT_EQ(sum(0x03FF, 0x0001), 0x0400);
    EXPECT_EQ(sum(0x0001, 0x8001), 0x0000);
    // 2^-24 * 0.5 is a tie with zero: to even (zero); * 0.75 rounds up to 2^-24.
    EXPECT_EQ(reduce_pair(dtype::float16, reduce_op::prod, 0x0001, 0x3800, isa), 0x0000);
    EXPECT_EQ(reduce_pair(dtype::float16, reduce_op::prod, 0x0001, 0x3A00, isa), 0x0001);
    // 3 * 2^-24 * 0.5 = 1.5 units: tie, to even (2 units).
    EXPECT_EQ(reduce_pair(dtype::float16, reduce_op::prod, 0x0003, 0x3800, isa), 0x0002);
    // Infinity and NaN.
    EXPECT_EQ(sum(0x7C00, 0x3C00), 0x7C00);
    EXPECT_EQ(sum(0x7C00, 0xFC00) & 0x7C00, 0x7C00);
    EXPECT_NE(sum(0x7C00, 0xFC00) & 0x03FF, 0);
    EXPECT_NE(sum(0x7E00, 0x3C00) & 0x03FF, 0);
    // min/max: NaN wins from either side; -0 and +0 keep the first operand.
    EXPECT_NE(reduce_pair(dtype::float16, reduce_op::min, 0x3C00, 0x7E00, isa) & 0x03FF, 0);
    EXPECT_NE(reduce_pair(dtype::float16, reduce_op::max, 0x7E00, 0x3C00, isa) & 0x03FF, 0);
    EXPECT_EQ(reduce_pair(dtype::float16, reduce_op::min, 0x8000, 0x0000, isa), 0x8000);
    EXPECT_EQ(reduce_pair(dtype::float16, reduce_op::max, 0x0000, 0x8000, isa), 0x0000);
    EXPECT_EQ(reduce_pair(dtype::float16, reduce_op::min, 0xFC00, 0x7BFF, isa), 0xFC00);
  }
}

TEST(CollectivesReduce, Bfloat16RoundingCorners) {
  for (kernel_isa isa : supported_isas()) {
    SCOPED_TRACE(std::string{to_string(isa)});
    const auto sum = [&](std::uint16_t a, std::uint16_t b) {
      return reduce_pair(dtype::bfloat16, reduce_op::sum, a, b, isa);
    };
    // 256 + 1: tie between 256 and 258 (ulp 2): even stays; 258 + 1 -> 260.
    EXPECT_EQ(sum(0x4380, 0x3F80), 0x4380);
    EXPECT_EQ(sum(0x4381, 0x3F80), 0x4382);
    // The largest finite doubled overflows to infinity.
    EXPECT_EQ(sum(0x7F7F, 0x7F7F), 0x7F80);
    EXPECT_EQ(sum(0xFF7F, 0xFF7F), 0xFF80);
    // Subnormals (2^-133 is the smallest) add exactly.
    EXPECT_EQ(sum(0x0001, 0x0001), 0x0002);
    EXPECT_EQ(sum(0x007F, 0x0001), 0x0080);
    // A signalling NaN comes out a quiet NaN, also from min (no arithmetic on it).
    EXPECT_EQ(sum(0x7F81, 0x3F80) & 0xFFC0, 0x7FC0);
    EXPECT_EQ(reduce_pair(dtype::bfloat16, reduce_op::min, 0x3F80, 0x7F81, isa) & 0xFFC0, 0x7FC0);
    EXPECT_EQ(reduce_pair(dtype::bfloat16, reduce_op::max, 0x8000, 0x0000, isa), 0x8000);
  }
}

TEST(CollectivesReduce, HalfConversionsMatchReferenceForEveryPattern) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const double f16 = decode(h, f16_format);
    const double bf16 = decode(h, bf16_format);
    ASSERT_TRUE(std::isnan(f16) ? std::isnan(float16_to_float(h))
                                : static_cast<double>(float16_to_float(h)) == f16)
        << bits;
    ASSERT_TRUE(std::isnan(bf16) ? std::isnan(bfloat16_to_float(h))
                                 : static_cast<double>(bfloat16_to_float(h)) == bf16)
        << bits;
    if (!std::isnan(f16)) {
      ASSERT_EQ(float_to_float16(float16_to_float(h)), h);
    }
    if (!std::isnan(bf16)) {
      ASSERT_EQ(float_to_bfloat16(bfloat16_to_float(h)), h);
    }
  }
  // float32 -> 16 bits against the reference rounding, on random and boundary floats.
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_float16(f), encode(f, f16_format)) << std::bit_cast<std::uint32_t>(f);
    ASSERT_EQ(float_to_bfloat16(f), encode(f, bf16_format)) << std::bit_cast<std::uint32_t>(f);
  }
  for (std::uint32_t around : {0x477FF000u, 0x33000000u, 0x38800000u, 0x387FF000u, 0x7F7F8000u}) {
    for (std::uint32_t delta = 0; delta < 3; ++delta) {
      for (float f : {std::bit_cast<float>(around + delta), std::bit_cast<float>(around - delta)}) {
        ASSERT_EQ(float_to_float16(f), encode(f, f16_format)) << std::bit_cast<std::uint32_t>(f);
        ASSERT_EQ(float_to_bfloat16(f), encode(f, bf16_format)) << std::bit_cast<std::uint32_t>(f);
      }
    }
  }
}

// ---- errors ------------------------------------------------------------------------------------

TEST(CollectivesReduce, BitwiseOnFloatTypesIsUnsupportedOp) {
  std::vector<std::byte> a(16), b(16);
  for (dtype t : {dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64}) {
    for (reduce_op op : {reduce_op::band, reduce_op::bor, reduce_op::bxor}) {
      const auto r = reduce_into(a, b, t, op);
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error(), errc::unsupported_op) << to_string(t) << " " << to_string(op);
    }
  }
}

TEST(CollectivesReduce, UnknownTypeOrOpIsRefused) {
  std::vector<std::byte> a(16), b(16);
  auto r = reduce_into(a, b, static_cast<dtype>(42), reduce_op::sum);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::unsupported_type);
  r = reduce_into(a, b, dtype::int32, static_cast<reduce_op>(42));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::unsupported_op);
  const auto f = finish_average(a, static_cast<dtype>(42), 2);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error(), errc::unsupported_type);
}

TEST(CollectivesReduce, SizeMismatchIsRefusedAndLeavesInoutAlone) {
  std::vector<std::byte> a(8, std::byte{1}), b(12), odd(6), odd2(6);
  auto r = reduce_into(a, b, dtype::float32, reduce_op::sum);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::size_mismatch);
  EXPECT_EQ(a, std::vector<std::byte>(8, std::byte{1}));
  r = reduce_into(odd, odd2, dtype::float32, reduce_op::sum);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::size_mismatch);
  const auto f = finish_average(odd, dtype::int64, 2);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error(), errc::size_mismatch);
}

TEST(CollectivesReduce, DefaultIsaIsSupportedAndNamed) {
  EXPECT_TRUE(kernel_isa_supported(default_kernel_isa()));
  EXPECT_TRUE(kernel_isa_supported(kernel_isa::portable));
  EXPECT_EQ(to_string(kernel_isa::avx2), "avx2");
}

// ---- finish_average ----------------------------------------------------------------------------

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <class T>
std::vector<T> values_of(const std::vector<std::byte>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(CollectivesReduce, AverageSumsThenDividesTruncatingIntegers) {
  auto a = bytes_of<std::int32_t>({7, -7, 100, 3});
  ASSERT_TRUE(reduce_into(a, bytes_of<std::int32_t>({0, 0, 1, 0}), dtype::int32, reduce_op::avg));
  ASSERT_TRUE(finish_average(a, dtype::int32, 2));
  EXPECT_EQ(values_of<std::int32_t>(a), (std::vector<std::int32_t>{3, -3, 50, 1}));

  auto b = bytes_of<std::int8_t>({127, -128});
  ASSERT_TRUE(finish_average(b, dtype::int8, 200));
  EXPECT_EQ(values_of<std::int8_t>(b), (std::vector<std::int8_t>{0, 0}));
  auto c = bytes_of<std::uint64_t>({~std::uint64_t{0}});
  ASSERT_TRUE(finish_average(c, dtype::uint64, 3));
  EXPECT_EQ(values_of<std::uint64_t>(c), (std::vector<std::uint64_t>{~std::uint64_t{0} / 3}));
  auto d = bytes_of<std::int64_t>({std::numeric_limits<std::int64_t>::min()});
  ASSERT_TRUE(finish_average(d, dtype::int64, 4000000000u));
  EXPECT_EQ(values_of<std::int64_t>(d),
            (std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min() / 4000000000}));

  const auto r = finish_average(a, dtype::int8, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::invalid_argument);
}

TEST(CollectivesReduce, AverageDividesFloats) {
  auto a = bytes_of<double>({3.0, -1.0, 1.0});
  ASSERT_TRUE(finish_average(a, dtype::float64, 3));
  EXPECT_EQ(values_of<double>(a), (std::vector<double>{1.0, -1.0 / 3, 1.0 / 3}));
  auto f = bytes_of<float>({6.0f, 1.0f});
  ASSERT_TRUE(finish_average(f, dtype::float32, 4));
  EXPECT_EQ(values_of<float>(f), (std::vector<float>{1.5f, 0.25f}));
  // float16 3.0 / 2 = 1.5 exactly; 1.0 / 3 rounds to nearest-even (0x3555).
  auto h = bytes_of<std::uint16_t>({0x4200, 0x3C00});
  ASSERT_TRUE(finish_average(h, dtype::float16, 2));
  EXPECT_EQ(values_of<std::uint16_t>(h), (std::vector<std::uint16_t>{0x3E00, 0x3800}));
  auto g = bytes_of<std::uint16_t>({0x3C00});
  ASSERT_TRUE(finish_average(g, dtype::float16, 3));
  EXPECT_EQ(values_of<std::uint16_t>(g)[0], encode(1.0 / 3, f16_format));
  auto bf = bytes_of<std::uint16_t>({0x4040});  // 3.0
  ASSERT_TRUE(finish_average(bf, dtype::bfloat16, 2));
  EXPECT_EQ(values_of<std::uint16_t>(bf)[0], 0x3FC0);  // 1.5
}

}  // namespace
}  // namespace vessel::collectives
