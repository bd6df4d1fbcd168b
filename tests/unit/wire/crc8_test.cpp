#include "wire/crc8.hpp"

#include <gtest/gtest.h>

#include <boost/crc.hpp>

#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

namespace vessel::wire {
namespace {

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>{s.data(), s.size()});
}

std::vector<std::byte> random_bytes(std::mt19937& rng, std::size_t n) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(byte(rng));
  return out;
}

// The table and the fold are constexpr: the check value is proven at compile time too.
constexpr std::uint8_t check_at_compile_time() {
  constexpr char text[] = "123456789";
  std::uint8_t crc = crc8_init;
  for (int i = 0; i < 9; ++i) crc = crc8_update(crc, static_cast<std::byte>(text[i]));
  return crc;
}
static_assert(check_at_compile_time() == 0xF4);
static_assert(detail::crc8_smbus_table[1] == 0x07);  // one byte of 0x01 is the polynomial itself

TEST(wire_crc8, crc8_of_123456789_is_the_smbus_check_value_f4) {
  EXPECT_EQ(crc8(as_bytes("123456789")), 0xF4);
}

TEST(wire_crc8, crc8_of_nothing_is_the_init_value_zero) {
  EXPECT_EQ(crc8({}), 0x00);
}

TEST(wire_crc8, incremental_crc8_equals_one_shot_at_every_split_point) {
  std::mt19937 rng(8);
  const auto data = random_bytes(rng, 300);
  const std::span<const std::byte> all{data};
  const std::uint8_t whole = crc8(all);
  for (std::size_t split = 0; split <= data.size(); ++split) {
    EXPECT_EQ(crc8_update(crc8(all.first(split)), all.subspan(split)), whole) << split;
  }
}

TEST(wire_crc8, crc8_agrees_with_boost_crc_parameterised_as_smbus) {
  // An independent implementation: Boost.CRC's bitwise-generic engine with the SMBUS parameters.
  std::mt19937 rng(0x5EED);
  for (std::size_t n = 0; n <= 300; ++n) {
    const auto data = random_bytes(rng, n);
    boost::crc_optimal<8, 0x07, 0x00, 0x00, false, false> reference;
    reference.process_bytes(data.data(), data.size());
    EXPECT_EQ(crc8(data), reference.checksum()) << n;
  }
}

TEST(wire_crc8, crc8_detects_every_single_bit_flip_in_a_256_byte_message) {
  std::mt19937 rng(81);
  auto data = random_bytes(rng, 256);
  const std::uint8_t good = crc8(data);
  for (std::size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    EXPECT_NE(crc8(data), good) << bit;
    data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace vessel::wire
