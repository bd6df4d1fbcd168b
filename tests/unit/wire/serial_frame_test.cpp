#include "wire/serial_frame.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "wire/crc8.hpp"
#include "wire/errc.hpp"
#include "wire/serial_decoder.hpp"

namespace vessel::wire {
namespace {

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

TEST(wire_serial_frame, constants_describe_a_256_byte_frame_with_3_bytes_of_overhead) {
  EXPECT_EQ(serial_start_byte, std::byte{0xAA});
  EXPECT_EQ(serial_max_payload, 253u);
  EXPECT_EQ(serial_frame_overhead, 3u);
  EXPECT_EQ(serial_max_frame_bytes, 256u);
  EXPECT_EQ(serial_frame_size(10), 13u);
}

TEST(wire_serial_frame, encode_writes_start_len_payload_and_crc8_over_len_and_payload) {
  // 0x72 = CRC-8/SMBUS of 03 01 02 03, computed independently (bitwise, outside this code base).
  std::array<std::byte, 16> out{};
  const auto payload = bytes_of({0x01, 0x02, 0x03});
  auto n = encode_serial_frame(payload, out);
  ASSERT_TRUE(n) << n.error().message();
  ASSERT_EQ(n.value(), 6u);
  EXPECT_EQ(std::vector<std::byte>(out.begin(), out.begin() + 6), bytes_of({0xAA, 0x03, 0x01, 0x02, 0x03, 0x72}));
}

TEST(wire_serial_frame, encode_of_an_empty_payload_is_start_zero_len_and_zero_crc) {
  std::array<std::byte, 3> out{};
  auto n = encode_serial_frame({}, out);
  ASSERT_TRUE(n);
  EXPECT_EQ(n.value(), 3u);
  EXPECT_EQ(std::vector<std::byte>(out.begin(), out.end()), bytes_of({0xAA, 0x00, 0x00}));
}

TEST(wire_serial_frame, encode_accepts_253_bytes_and_rejects_254) {
  std::vector<std::byte> payload(254, std::byte{0x42});
  std::vector<std::byte> out(300);
  auto ok = encode_serial_frame(std::span{payload}.first(253), out);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok.value(), 256u);
  auto too_large = encode_serial_frame(payload, out);
  ASSERT_FALSE(too_large);
  EXPECT_EQ(too_large.error(), errc::serial_payload_too_large);
}

TEST(wire_serial_frame, encode_rejects_a_short_destination_and_leaves_it_untouched) {
  const auto payload = bytes_of({1, 2, 3, 4});
  std::vector<std::byte> out(6, std::byte{0x5A});  // one short of 7
  auto n = encode_serial_frame(payload, out);
  ASSERT_FALSE(n);
  EXPECT_EQ(n.error(), errc::buffer_too_small);
  EXPECT_EQ(out, std::vector<std::byte>(6, std::byte{0x5A}));
}

TEST(wire_serial_frame, encode_in_place_over_its_own_payload_gives_the_same_frame) {
  const auto payload = bytes_of({0xAA, 0x10, 0x20, 0xAA, 0x30});
  std::vector<std::byte> expected(8);
  ASSERT_TRUE(encode_serial_frame(payload, expected));

  std::vector<std::byte> buffer(8);
  std::copy(payload.begin(), payload.end(), buffer.begin());  // payload at the front, overlapping
  ASSERT_TRUE(encode_serial_frame(std::span{buffer}.first(5), buffer));
  EXPECT_EQ(buffer, expected);
}

TEST(wire_serial_frame, random_payloads_of_every_length_0_to_253_round_trip_through_the_decoder) {
  std::mt19937 rng(253);
  std::uniform_int_distribution<int> byte(0, 255);
  serial_decoder decoder(std::chrono::milliseconds{10});
  std::array<std::byte, serial_max_frame_bytes> frame{};
  for (std::size_t len = 0; len <= serial_max_payload; ++len) {
    std::vector<std::byte> payload(len);
    for (auto& b : payload) b = static_cast<std::byte>(byte(rng));
    auto n = encode_serial_frame(payload, frame);
    ASSERT_TRUE(n);
    ASSERT_EQ(n.value(), len + 3);
    EXPECT_EQ(static_cast<std::uint8_t>(frame[len + 2]),
              crc8_update(crc8_update(crc8_init, frame[1]), payload));
    ASSERT_EQ(decoder.feed(std::span{frame}.first(n.value()), {}), n.value());
    auto got = decoder.next();
    ASSERT_TRUE(got) << len;
    EXPECT_EQ(std::vector<std::byte>(got->begin(), got->end()), payload) << len;
    EXPECT_FALSE(decoder.next());
  }
  const auto& c = decoder.counters();
  EXPECT_EQ(c.frames_ok, 254u);
  EXPECT_EQ(c.crc_errors + c.bad_length + c.truncated + c.resync_bytes, 0u);
  EXPECT_EQ(decoder.buffered(), 0u);
}

}  // namespace
}  // namespace vessel::wire
