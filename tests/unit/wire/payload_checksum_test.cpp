#include "wire/payload_checksum.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "wire/frame_codec.hpp"
#include "wire/stream_decoder.hpp"

namespace vessel::wire {
namespace {

std::vector<std::byte> bytes_of(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(i * 131 + 7);
  return v;
}

frame_header data_header(std::size_t payload_len) {
  frame_header h;
  h.seq = 9;
  h.payload_len = static_cast<std::uint32_t>(payload_len);
  h.body = data_fields{.src = 1, .dst = 2, .tag = 3, .message_id = 4, .fragment_index = 0,
                       .fragment_count = 1, .total_len = payload_len, .fragment_offset = 0};
  return h;
}

TEST(payload_checksum, sealed_payload_survives_the_stream_and_checks) {
  auto payload = bytes_of(1000);
  auto header = data_header(payload.size());
  seal_payload_crc(header, payload);
  std::vector<std::byte> stream;
  ASSERT_TRUE(frame_encoder{}.encode_to(header, payload, stream));

  stream_decoder decoder;
  ASSERT_EQ(decoder.feed(stream), stream.size());
  auto frame = decoder.next();
  ASSERT_TRUE(frame && frame.value());
  EXPECT_EQ(frame.value()->header.crc32c, crc32c(payload));
  EXPECT_TRUE(check_payload_crc(frame.value()->header, frame.value()->payload));
}

TEST(payload_checksum, every_single_bit_flip_in_the_payload_is_a_crc_mismatch) {
  auto payload = bytes_of(64);
  auto header = data_header(payload.size());
  seal_payload_crc(header, payload);
  for (std::size_t bit = 0; bit < payload.size() * 8; ++bit) {
    auto corrupt = payload;
    corrupt[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    auto checked = check_payload_crc(header, corrupt);
    ASSERT_FALSE(checked) << bit;
    EXPECT_EQ(checked.error(), errc::crc_mismatch);
  }
}

TEST(payload_checksum, header_without_crc_accepts_any_payload) {
  auto payload = bytes_of(16);
  auto header = data_header(payload.size());
  EXPECT_FALSE(header.crc32c.has_value());
  EXPECT_TRUE(check_payload_crc(header, payload));
}

}  // namespace
}  // namespace vessel::wire
