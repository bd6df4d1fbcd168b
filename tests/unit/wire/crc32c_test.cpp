#include "wire/crc32c.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

namespace vessel::wire {
namespace {

std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span{text.data(), text.size()});
}

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng{seed};
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// Known answers: the check value (RFC 3720 / CRC catalogue) and the iSCSI vectors of RFC 3720 B.4.
struct known_vector {
  const char* name;
  std::vector<std::byte> data;
  std::uint32_t crc;
};

std::vector<known_vector> known_vectors() {
  std::vector<known_vector> v;
  const std::string_view check = "123456789";
  v.push_back({"check", {bytes_of(check).begin(), bytes_of(check).end()}, 0xE3069283u});
  v.push_back({"empty", {}, 0x00000000u});
  v.push_back({"32 zeros", std::vector<std::byte>(32, std::byte{0x00}), 0x8A9136AAu});
  v.push_back({"32 ones", std::vector<std::byte>(32, std::byte{0xFF}), 0x62A8AB43u});
  std::vector<std::byte> up(32);
  std::vector<std::byte> down(32);
  for (std::size_t i = 0; i < 32; ++i) {
    up[i] = static_cast<std::byte>(i);
    down[i] = static_cast<std::byte>(31 - i);
  }
  v.push_back({"incrementing 0..31", up, 0x46DD794Eu});
  v.push_back({"decrementing 31..0", down, 0x113FDB5Cu});
  return v;
}

TEST(crc32c, matches_the_published_check_value_and_rfc3720_vectors) {
  for (const auto& kv : known_vectors()) {
    EXPECT_EQ(crc32c(kv.data), kv.crc) << kv.name;
    EXPECT_EQ(crc32c_extend_table(0, kv.data), kv.crc) << kv.name;
    if (crc32c_sse42_supported()) {
      EXPECT_EQ(crc32c_extend_sse42(0, kv.data), kv.crc) << kv.name;
    }
  }
}

TEST(crc32c, reports_the_implementation_it_dispatches_to) {
  const std::string_view name = crc32c_implementation();
  if (crc32c_sse42_supported()) {
    EXPECT_EQ(name, "sse4.2");
  } else {
    EXPECT_TRUE(name == "table" || name == "sse4.2-serial") << name;
  }
}

// Every length 0..4096 from every start offset 0..7: covers the 3-stream blocks of each stride,
// the switch to one stream, the 8-byte and 1-byte tails, and unaligned loads.
TEST(crc32c, hardware_path_equals_table_for_every_length_and_alignment) {
  if (!crc32c_sse42_supported()) GTEST_SKIP() << "CPU lacks SSE4.2 + PCLMULQDQ";
  const std::vector<std::byte> buffer = random_bytes(4096 + 8, 20261129);
  const std::span<const std::byte> all{buffer};
  for (std::size_t start = 0; start < 8; ++start) {
    for (std::size_t len = 0; len <= 4096; ++len) {
      const auto piece = all.subspan(start, len);
      ASSERT_EQ(crc32c_extend_sse42(0, piece), crc32c_extend_table(0, piece))
          << "start " << start << " len " << len;
    }
  }
}

// Lengths past the largest stride (3 x 8 KiB) and not multiples of anything.
TEST(crc32c, hardware_path_equals_table_on_large_buffers) {
  if (!crc32c_sse42_supported()) GTEST_SKIP() << "CPU lacks SSE4.2 + PCLMULQDQ";
  const std::vector<std::byte> buffer = random_bytes(300'001, 7);
  const std::span<const std::byte> all{buffer};
  for (std::size_t len : {24'575u, 24'576u, 24'577u, 65'536u, 100'003u, 300'000u}) {
    EXPECT_EQ(crc32c_extend_sse42(0, all.subspan(1, len)), crc32c_extend_table(0, all.subspan(1, len)))
        << len;
  }
}

TEST(crc32c, extend_over_pieces_equals_the_whole) {
  const std::vector<std::byte> buffer = random_bytes(10'000, 42);
  const std::span<const std::byte> all{buffer};
  const std::uint32_t whole = crc32c(all);
  EXPECT_EQ(whole, crc32c_extend_table(0, all));
  std::mt19937 rng{99};
  for (int round = 0; round < 200; ++round) {
    std::uint32_t crc = 0;
    std::uint32_t crc_table = 0;
    std::size_t at = 0;
    while (at < all.size()) {
      const std::size_t n = std::min<std::size_t>(rng() % 3000, all.size() - at);
      crc = crc32c_extend(crc, all.subspan(at, n));
      crc_table = crc32c_extend_table(crc_table, all.subspan(at, n));
      at += n;
    }
    ASSERT_EQ(crc, whole) << "round " << round;
    ASSERT_EQ(crc_table, whole) << "round " << round;
  }
}

TEST(crc32c, extending_by_nothing_changes_nothing) {
  const std::uint32_t crc = crc32c(bytes_of("123456789"));
  EXPECT_EQ(crc32c_extend(crc, {}), crc);
  EXPECT_EQ(crc32c_extend_table(crc, {}), crc);
}

TEST(crc32c, detects_every_single_bit_flip) {
  std::vector<std::byte> buffer = random_bytes(512, 3);
  const std::uint32_t original = crc32c(buffer);
  for (std::size_t bit = 0; bit < buffer.size() * 8; ++bit) {
    buffer[bit / 8] ^= std::byte{1} << (bit % 8);
    ASSERT_NE(crc32c(buffer), original) << bit;
    buffer[bit / 8] ^= std::byte{1} << (bit % 8);
  }
  EXPECT_EQ(crc32c(buffer), original);
}

}  // namespace
}  // namespace vessel::wire
