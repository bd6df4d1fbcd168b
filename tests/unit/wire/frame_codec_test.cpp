#include "wire/frame_codec.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "tests/unit/wire/frame_test_support.hpp"
#include "wire/errc.hpp"

namespace vessel::wire {
namespace {

using test::bytes_of;
using test::one_header_per_kind;

// The header message of an encoded frame, copied to word-aligned memory (vector<uint64_t>).
std::vector<std::uint64_t> aligned_header(std::span<const std::byte> header_bytes) {
  std::vector<std::uint64_t> words((header_bytes.size() - prefix_bytes) / 8);
  std::memcpy(words.data(), header_bytes.data() + prefix_bytes, words.size() * 8);
  return words;
}

result<frame_header> decode_words(const std::vector<std::uint64_t>& words,
                                  const decoder_limits& limits = {}) {
  return decode_header({reinterpret_cast<const std::byte*>(words.data()), words.size() * 8},
                       limits);
}

TEST(frame_codec, every_kind_round_trips_through_encode_and_decode_header) {
  frame_encoder encoder;
  for (const auto& header : one_header_per_kind()) {
    ASSERT_TRUE(encoder.encode(header, {})) << static_cast<int>(header.kind());
    auto decoded = decode_words(aligned_header(encoder.header_bytes()));
    ASSERT_TRUE(decoded) << decoded.error().message();
    EXPECT_EQ(decoded.value(), header) << static_cast<int>(header.kind());
    EXPECT_EQ(decoded.value().kind(), header.kind());
  }
}

TEST(frame_codec, encoder_returns_prefix_and_header_then_the_callers_payload_uncopied) {
  frame_encoder encoder;
  frame_header header = one_header_per_kind()[1];
  auto payload = bytes_of(1000, 7);
  header.payload_len = 1000;
  auto iov = encoder.encode(header, payload);
  ASSERT_TRUE(iov);
  EXPECT_EQ(iov.value()[1].iov_base, payload.data());
  EXPECT_EQ(iov.value()[1].iov_len, payload.size());
  auto head = encoder.header_bytes();
  EXPECT_EQ(iov.value()[0].iov_base, head.data());
  EXPECT_EQ(iov.value()[0].iov_len, head.size());
  const std::uint32_t header_len = std::to_integer<std::uint32_t>(head[0]) |
                                   std::to_integer<std::uint32_t>(head[1]) << 8 |
                                   std::to_integer<std::uint32_t>(head[2]) << 16 |
                                   std::to_integer<std::uint32_t>(head[3]) << 24;
  EXPECT_EQ(header_len + prefix_bytes, head.size());
}

TEST(frame_codec, header_len_is_a_whole_number_of_words_for_every_kind) {
  frame_encoder encoder;
  for (const auto& header : one_header_per_kind()) {
    ASSERT_TRUE(encoder.encode(header, {}));
    const std::size_t header_len = encoder.header_bytes().size() - prefix_bytes;
    EXPECT_EQ(header_len % 8, 0u);
    EXPECT_GE(header_len, min_header_bytes);
    EXPECT_LE(header_len, max_encoded_header_bytes);
  }
}

TEST(frame_codec, largest_hello_fits_one_segment_of_the_documented_size) {
  frame_encoder encoder;
  frame_header header = one_header_per_kind()[0];  // both nonces present
  ASSERT_TRUE(encoder.encode(header, {}));
  auto head = encoder.header_bytes();
  // Table: count-1 = 0, then 18 words: root, Frame (3 data + 1 ptr), Hello (3 + 2), 2 x 4 nonce.
  EXPECT_EQ(std::to_integer<int>(head[4]), 0);
  EXPECT_EQ(std::to_integer<int>(head[8]), 18);
  EXPECT_EQ(head.size(), prefix_bytes + 8 + 18 * 8);
}

TEST(frame_codec, encoder_rejects_payload_that_disagrees_with_payload_len) {
  frame_encoder encoder;
  frame_header header = one_header_per_kind()[1];
  header.payload_len = 10;
  auto payload = bytes_of(9, 0);
  auto iov = encoder.encode(header, payload);
  ASSERT_FALSE(iov);
  EXPECT_EQ(iov.error(), errc::bad_field);
  EXPECT_TRUE(encoder.header_bytes().empty());
}

TEST(frame_codec, encode_to_appends_prefix_header_and_payload) {
  frame_encoder encoder;
  frame_header header = one_header_per_kind()[1];
  auto payload = bytes_of(33, 1);
  header.payload_len = 33;
  std::vector<std::byte> out{std::byte{0xee}};
  ASSERT_TRUE(encoder.encode_to(header, payload, out));
  const auto head = encoder.header_bytes();
  ASSERT_EQ(out.size(), 1 + head.size() + payload.size());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), out.begin() + 1));
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), out.begin() + 1 + head.size()));
}

TEST(frame_codec, absent_nonces_and_crc_round_trip_as_absent) {
  frame_encoder encoder;
  frame_header header;
  header.body = hello_fields{1, 2, 3, std::nullopt, std::nullopt, 4};
  ASSERT_TRUE(encoder.encode(header, {}));
  auto decoded = decode_words(aligned_header(encoder.header_bytes()));
  ASSERT_TRUE(decoded);
  const auto& hello = std::get<hello_fields>(decoded.value().body);
  EXPECT_FALSE(hello.challenge.has_value());
  EXPECT_FALSE(hello.response.has_value());
  EXPECT_FALSE(decoded.value().crc32c.has_value());
}

TEST(frame_codec, decode_header_rejects_unaligned_input) {
  frame_encoder encoder;
  ASSERT_TRUE(encoder.encode(one_header_per_kind()[2], {}));
  auto words = aligned_header(encoder.header_bytes());
  std::vector<std::byte> shifted(words.size() * 8 + 8);
  std::memcpy(shifted.data() + 1, words.data(), words.size() * 8);
  auto decoded = decode_header({shifted.data() + 1, words.size() * 8}, {});
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error(), errc::malformed_header);
}

TEST(frame_codec, decode_header_rejects_trailing_words_outside_the_segment_table) {
  frame_encoder encoder;
  ASSERT_TRUE(encoder.encode(one_header_per_kind()[2], {}));
  auto words = aligned_header(encoder.header_bytes());
  words.push_back(0);
  auto decoded = decode_words(words);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error(), errc::bad_segment_table);
}

TEST(frame_codec, multi_segment_header_from_capnp_is_accepted) {
  // A builder with one-word segments spreads the message over several segments.
  capnp::MallocMessageBuilder builder(1, capnp::AllocationStrategy::FIXED_SIZE);
  auto frame = builder.initRoot<schema::Frame>();
  frame.setVersion(1);
  frame.setSeq(5);
  frame.initCredit().setBytes(4096);
  ASSERT_GT(builder.getSegmentsForOutput().size(), 1u);
  auto bytes = test::frame_from_message(builder);
  std::vector<std::uint64_t> words((bytes.size() - 4) / 8);
  std::memcpy(words.data(), bytes.data() + 4, words.size() * 8);
  auto decoded = decode_words(words);
  ASSERT_TRUE(decoded) << decoded.error().message();
  EXPECT_EQ(decoded.value().seq, 5u);
  EXPECT_EQ(std::get<credit_fields>(decoded.value().body).bytes, 4096u);
}

TEST(frame_codec, too_many_segments_is_a_bad_segment_table) {
  capnp::MallocMessageBuilder builder(1, capnp::AllocationStrategy::FIXED_SIZE);
  auto frame = builder.initRoot<schema::Frame>();
  frame.initCredit().setBytes(1);
  const auto segments = builder.getSegmentsForOutput().size();
  auto bytes = test::frame_from_message(builder);
  std::vector<std::uint64_t> words((bytes.size() - 4) / 8);
  std::memcpy(words.data(), bytes.data() + 4, words.size() * 8);
  decoder_limits limits;
  limits.max_segments = static_cast<std::uint32_t>(segments - 1);
  auto decoded = decode_words(words, limits);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error(), errc::bad_segment_table);
}

// -- the data-frame fast paths (encode and decode without Cap'n Proto's builder and reader) ----

frame_header random_data_header(std::mt19937_64& rng) {
  for (;;) {
    auto h = test::random_header(rng, static_cast<std::uint32_t>(rng() % 5000));
    if (h.kind() == frame_kind::data) return h;
  }
}

std::vector<std::uint64_t> words_of(const std::vector<std::byte>& message) {
  std::vector<std::uint64_t> words(message.size() / 8);
  std::memcpy(words.data(), message.data(), words.size() * 8);
  return words;
}

// Both decoders give the same verdict: the same error, or equal headers.
void expect_same_verdict(const std::vector<std::uint64_t>& words, const decoder_limits& limits) {
  const std::span<const std::byte> message{reinterpret_cast<const std::byte*>(words.data()),
                                           words.size() * 8};
  auto fast = decode_header(message, limits);
  auto generic = detail::decode_header_with_capnp(message, limits);
  ASSERT_EQ(fast.has_value(), generic.has_value())
      << (fast ? generic.error().message() : fast.error().message());
  if (fast) {
    EXPECT_EQ(fast.value(), generic.value());
  } else {
    EXPECT_EQ(fast.error(), generic.error());
  }
}

TEST(frame_codec, data_frames_are_written_byte_for_byte_as_capnp_writes_them) {
  std::mt19937_64 rng{11};
  frame_encoder encoder;
  for (int i = 0; i < 2000; ++i) {
    auto h = random_data_header(rng);
    if (i % 7 == 0) h.version = static_cast<std::uint16_t>(rng());
    const auto payload = bytes_of(h.payload_len, 1);
    ASSERT_TRUE(encoder.encode(h, payload));
    const auto expected = detail::encode_header_with_capnp(h);
    ASSERT_FALSE(expected.empty());
    const auto head = encoder.header_bytes().subspan(prefix_bytes);
    ASSERT_EQ(head.size(), expected.size());
    EXPECT_EQ(std::memcmp(head.data(), expected.data(), expected.size()), 0) << "header " << i;
  }
}

TEST(frame_codec, data_fast_path_agrees_with_the_capnp_reader_on_mutated_headers) {
  std::mt19937_64 rng{12};
  for (int i = 0; i < 6000; ++i) {
    auto words = words_of(detail::encode_header_with_capnp(random_data_header(rng)));
    ASSERT_FALSE(words.empty());
    const std::size_t mutations = 1 + rng() % 3;
    for (std::size_t m = 0; m < mutations; ++m) {
      auto* bytes = reinterpret_cast<std::uint8_t*>(words.data());
      const std::size_t at = 8 + rng() % (words.size() * 8 - 8);  // leave the segment table
      switch (rng() % 4) {
        case 0: bytes[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8)); break;
        case 1: bytes[at] = static_cast<std::uint8_t>(rng()); break;
        // The two pointers (root, Frame's data pointer) and their section sizes: the fields a
        // hostile peer would aim at.
        case 2: bytes[(rng() % 2 == 0 ? 8 : 40) + rng() % 8] = static_cast<std::uint8_t>(rng()); break;
        default: words[1 + (rng() % 2) * 4] = rng(); break;
      }
    }
    decoder_limits limits;
    if (i % 5 == 0) limits.max_payload_bytes = static_cast<std::uint32_t>(rng() % 5000);
    if (i % 7 == 0) limits.max_fragments = static_cast<std::uint32_t>(rng() % 1000);
    expect_same_verdict(words, limits);
    if (HasFatalFailure()) return;
  }
}

TEST(frame_codec, data_header_placed_before_its_frame_decodes_as_capnp_reads_it) {
  // A writer may lay the DataHeader out before the Frame (a negative pointer offset), or give a
  // struct more data words than this schema knows: both are valid Cap'n Proto.
  capnp::MallocMessageBuilder builder;
  auto orphan = builder.getOrphanage().newOrphan<schema::DataHeader>();
  orphan.get().setSrc(3);
  orphan.get().setFragmentCount(1);
  orphan.get().setTotalLen(8);
  auto frame = builder.initRoot<schema::Frame>();
  frame.setVersion(1);
  frame.setSeq(77);
  frame.setPayloadLen(8);
  frame.adoptData(kj::mv(orphan));
  auto bytes = test::frame_from_message(builder);
  std::vector<std::uint64_t> words((bytes.size() - 4) / 8);
  std::memcpy(words.data(), bytes.data() + 4, words.size() * 8);
  auto decoded = decode_words(words);
  ASSERT_TRUE(decoded) << decoded.error().message();
  EXPECT_EQ(decoded.value().seq, 77u);
  EXPECT_EQ(std::get<data_fields>(decoded.value().body).src, 3u);
  expect_same_verdict(words, {});
}

TEST(frame_codec, other_kinds_still_round_trip_with_the_data_fast_path_in_place) {
  std::mt19937_64 rng{13};
  frame_encoder encoder;
  for (int i = 0; i < 500; ++i) {
    auto h = test::random_header(rng, 0);
    ASSERT_TRUE(encoder.encode(h, {}));
    auto words = aligned_header(encoder.header_bytes());
    auto decoded = decode_words(words);
    ASSERT_TRUE(decoded) << decoded.error().message();
    EXPECT_EQ(decoded.value(), h);
    expect_same_verdict(words, {});
  }
}

}  // namespace
}  // namespace vessel::wire
