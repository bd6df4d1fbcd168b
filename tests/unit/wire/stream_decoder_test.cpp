#include "wire/stream_decoder.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "tests/unit/wire/frame_test_support.hpp"
#include "wire/errc.hpp"

namespace vessel::wire {
namespace {

using test::bytes_of;
using test::one_header_per_kind;

struct decoded_frame {
  frame_header header;
  std::vector<std::byte> payload;
};

struct stream_result {
  std::vector<decoded_frame> frames;
  std::error_code error;
};

// Feeds `stream` in chunks whose sizes `next_chunk` picks, draining frames after every chunk.
stream_result decode_stream(stream_decoder& decoder, std::span<const std::byte> stream,
                            const std::function<std::size_t()>& next_chunk) {
  stream_result out;
  while (true) {
    for (;;) {
      auto frame = decoder.next();
      if (!frame) {
        out.error = frame.error();
        return out;
      }
      if (!frame.value()) break;
      const auto& view = *frame.value();
      out.frames.push_back({view.header, {view.payload.begin(), view.payload.end()}});
    }
    if (stream.empty()) return out;
    auto chunk = stream.first(std::min(stream.size(), std::max<std::size_t>(1, next_chunk())));
    const std::size_t taken = decoder.feed(chunk);
    stream = stream.subspan(taken);
  }
}

stream_result decode_stream(std::span<const std::byte> stream, std::size_t chunk,
                            decoder_limits limits = {}) {
  stream_decoder decoder(limits);
  return decode_stream(decoder, stream, [chunk] { return chunk; });
}

// One frame of every kind, each with a payload of a different length (zero included).
struct sample_stream {
  std::vector<frame_header> headers;
  std::vector<std::vector<std::byte>> payloads;
  std::vector<std::byte> bytes;
};

sample_stream every_kind_stream() {
  sample_stream s;
  frame_encoder encoder;
  std::uint32_t len = 0;
  for (auto header : one_header_per_kind()) {
    header.payload_len = len;
    s.payloads.push_back(bytes_of(len, static_cast<std::uint8_t>(len)));
    EXPECT_TRUE(encoder.encode_to(header, s.payloads.back(), s.bytes));
    s.headers.push_back(header);
    len = len * 3 + 5;
  }
  return s;
}

void expect_frames(const stream_result& got, const sample_stream& want) {
  ASSERT_FALSE(got.error) << got.error.message();
  ASSERT_EQ(got.frames.size(), want.headers.size());
  for (std::size_t i = 0; i < want.headers.size(); ++i) {
    EXPECT_EQ(got.frames[i].header, want.headers[i]) << i;
    EXPECT_EQ(got.frames[i].payload, want.payloads[i]) << i;
  }
}

TEST(stream_decoder, every_kind_decodes_from_one_feed_holding_many_frames) {
  auto s = every_kind_stream();
  expect_frames(decode_stream(s.bytes, s.bytes.size()), s);
}

TEST(stream_decoder, every_kind_decodes_when_fed_one_byte_at_a_time) {
  auto s = every_kind_stream();
  expect_frames(decode_stream(s.bytes, 1), s);
}

TEST(stream_decoder, frames_decode_under_random_splits) {
  auto s = every_kind_stream();
  std::mt19937_64 rng(20261129);
  for (int round = 0; round < 50; ++round) {
    stream_decoder decoder;
    auto got = decode_stream(decoder, s.bytes, [&] { return 1 + rng() % 97; });
    expect_frames(got, s);
  }
}

TEST(stream_decoder, frame_split_across_feeds_waits_for_its_last_byte) {
  frame_encoder encoder;
  frame_header header = one_header_per_kind()[1];
  auto payload = bytes_of(100, 3);
  header.payload_len = 100;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(encoder.encode_to(header, payload, bytes));

  stream_decoder decoder;
  ASSERT_EQ(decoder.feed(std::span(bytes).first(bytes.size() - 1)), bytes.size() - 1);
  auto none = decoder.next();
  ASSERT_TRUE(none);
  EXPECT_FALSE(none.value().has_value());
  ASSERT_EQ(decoder.feed(std::span(bytes).last(1)), 1u);
  auto frame = decoder.next();
  ASSERT_TRUE(frame);
  ASSERT_TRUE(frame.value().has_value());
  EXPECT_EQ(frame.value()->header, header);
  EXPECT_TRUE(std::ranges::equal(frame.value()->payload, payload));
  EXPECT_EQ(decoder.buffered(), 0u);
}

TEST(stream_decoder, prepare_and_commit_receive_in_place) {
  auto s = every_kind_stream();
  stream_decoder decoder;
  std::span<const std::byte> rest = s.bytes;
  std::vector<decoded_frame> frames;
  while (!rest.empty()) {
    auto space = decoder.prepare();
    const std::size_t n = std::min<std::size_t>({space.size(), rest.size(), 13});
    std::memcpy(space.data(), rest.data(), n);
    decoder.commit(n);
    rest = rest.subspan(n);
    while (true) {
      auto frame = decoder.next();
      ASSERT_TRUE(frame);
      if (!frame.value()) break;
      frames.push_back({frame.value()->header,
                        {frame.value()->payload.begin(), frame.value()->payload.end()}});
    }
  }
  expect_frames({frames, {}}, s);
}

// Receives `bytes` the way tcp_transport does (prepare, a recv of at most `chunk`, commit, then
// next() until nothing), redirecting every payload of at least `min_redirect` bytes still to
// come into memory of its own, as a link hands out its reassembly destination: its first
// `head_bytes` (or all, if shorter) into a head part of their own when head_bytes is not 0.
stream_result receive_redirecting(std::span<const std::byte> bytes, std::size_t chunk,
                                  std::size_t min_redirect, std::size_t& redirected,
                                  std::size_t head_bytes = 0) {
  stream_decoder decoder;
  stream_result out;
  std::vector<std::vector<std::byte>> destinations;
  std::vector<std::vector<std::byte>> heads;
  redirected = 0;
  while (true) {
    for (;;) {
      auto frame = decoder.next();
      if (!frame) {
        out.error = frame.error();
        return out;
      }
      if (frame.value()) {
        const auto& view = *frame.value();
        const bool into_destination =
            !destinations.empty() && view.payload.data() == destinations.back().data();
        if (into_destination) ++redirected;
        std::vector<std::byte> payload;
        if (!view.head.empty()) {
          EXPECT_TRUE(into_destination && view.head.data() == heads.back().data())
              << "a head comes only with a redirected payload, in its own part";
          payload.assign(view.head.begin(), view.head.end());
        }
        payload.insert(payload.end(), view.payload.begin(), view.payload.end());
        out.frames.push_back({view.header, std::move(payload)});
        continue;
      }
      if (const frame_header* h = decoder.awaiting_payload();
          h != nullptr && h->payload_len - decoder.payload_buffered() >= min_redirect) {
        EXPECT_EQ(decoder.payload_arrived().size(), decoder.payload_buffered());
        const std::size_t head = std::min<std::size_t>(head_bytes, h->payload_len);
        heads.emplace_back(head, std::byte{0xdd});
        destinations.emplace_back(h->payload_len - head, std::byte{0xee});
        std::vector<std::byte> one_more(destinations.back().size() + 1);
        EXPECT_FALSE(decoder.redirect_payload(heads.back(), one_more))
            << "parts of another size together are refused";
        EXPECT_TRUE(decoder.redirect_payload(heads.back(), destinations.back()));
        EXPECT_EQ(decoder.awaiting_payload(), nullptr) << "redirected once";
        EXPECT_TRUE(decoder.payload_arrived().empty()) << "what had arrived moved to the parts";
      }
      break;
    }
    if (bytes.empty()) return out;
    auto space = decoder.prepare();
    const std::size_t n = std::min({space.size(), bytes.size(), chunk});
    std::memcpy(space.data(), bytes.data(), n);
    decoder.commit(n);
    bytes = bytes.subspan(n);
  }
}

TEST(stream_decoder, a_redirected_payload_arrives_in_its_destination_and_the_stream_goes_on) {
  auto s = every_kind_stream();
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{64}}) {
    std::size_t redirected = 0;
    const stream_result got = receive_redirecting(s.bytes, chunk, 1, redirected);
    expect_frames(got, s);
    EXPECT_GT(redirected, 0u) << "chunk " << chunk;
  }
}

TEST(stream_decoder, a_payload_redirected_into_a_head_and_a_body_arrives_split_between_them) {
  auto s = every_kind_stream();
  for (const std::size_t head : {std::size_t{1}, std::size_t{8}, std::size_t{16}, std::size_t{5000}}) {
    for (const std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{64}}) {
      std::size_t redirected = 0;
      const stream_result got = receive_redirecting(s.bytes, chunk, 1, redirected, head);
      expect_frames(got, s);
      EXPECT_GT(redirected, 0u) << "head " << head << ", chunk " << chunk;
    }
  }
}

TEST(stream_decoder, payload_arrived_is_the_start_of_the_payload_awaited) {
  frame_encoder encoder;
  const auto header = one_header_per_kind().front();
  auto h = header;
  const std::vector<std::byte> payload = bytes_of(1000, 3);
  h.payload_len = 1000;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(encoder.encode_to(h, payload, bytes));
  stream_decoder decoder;
  EXPECT_TRUE(decoder.awaiting_header());
  const std::size_t header_end = bytes.size() - payload.size();
  decoder.feed(std::span{bytes}.first(header_end + 10));
  auto none = decoder.next();
  ASSERT_TRUE(none);
  EXPECT_FALSE(none.value());
  EXPECT_FALSE(decoder.awaiting_header());
  const auto arrived = decoder.payload_arrived();
  ASSERT_EQ(arrived.size(), 10u);
  EXPECT_TRUE(std::equal(arrived.begin(), arrived.end(), payload.begin()));
  decoder.feed(std::span{bytes}.subspan(header_end + 10));
  auto frame = decoder.next();
  ASSERT_TRUE(frame);
  ASSERT_TRUE(frame.value());
  EXPECT_TRUE(frame.value()->head.empty());
  EXPECT_TRUE(decoder.payload_arrived().empty()) << "nothing awaited";
  EXPECT_TRUE(decoder.awaiting_header());
}

TEST(stream_decoder, redirect_needs_a_frame_waiting_for_its_payload) {
  stream_decoder decoder;
  std::vector<std::byte> dst(16);
  EXPECT_EQ(decoder.awaiting_payload(), nullptr);
  EXPECT_FALSE(decoder.redirect_payload(dst));
  auto s = every_kind_stream();
  decoder.feed(s.bytes);  // whole frames only: none waits for its payload
  ASSERT_TRUE(decoder.next());
  EXPECT_EQ(decoder.awaiting_payload(), nullptr);
  EXPECT_FALSE(decoder.redirect_payload(dst));
}

TEST(stream_decoder, zero_length_payloads_yield_empty_views) {
  frame_encoder encoder;
  std::vector<std::byte> bytes;
  for (auto header : one_header_per_kind()) ASSERT_TRUE(encoder.encode_to(header, {}, bytes));
  auto got = decode_stream(bytes, 5);
  ASSERT_FALSE(got.error);
  ASSERT_EQ(got.frames.size(), one_header_per_kind().size());
  for (const auto& f : got.frames) EXPECT_TRUE(f.payload.empty());
}

TEST(stream_decoder, random_headers_and_payloads_round_trip) {
  std::mt19937_64 rng(0x5eed);
  frame_encoder encoder;
  std::vector<std::byte> bytes;
  sample_stream s;
  for (int i = 0; i < 400; ++i) {
    const auto len = static_cast<std::uint32_t>(rng() % 4 == 0 ? 0 : rng() % 3000);
    s.headers.push_back(test::random_header(rng, len));
    s.payloads.push_back(bytes_of(len, static_cast<std::uint8_t>(rng())));
    ASSERT_TRUE(encoder.encode_to(s.headers.back(), s.payloads.back(), s.bytes));
  }
  // A small receive buffer forces compaction many times along the way.
  decoder_limits limits;
  limits.max_payload_bytes = 4096;
  stream_decoder decoder(limits);
  expect_frames(decode_stream(decoder, s.bytes, [&] { return 1 + rng() % 5000; }), s);
}

TEST(stream_decoder, largest_allowed_frame_fits_after_compaction) {
  decoder_limits limits;
  limits.max_payload_bytes = 1000;
  frame_encoder encoder;
  std::vector<std::byte> bytes;
  frame_header small;
  small.body = ack_fields{1};
  ASSERT_TRUE(encoder.encode_to(small, {}, bytes));
  frame_header big;
  big.body = hello_fields{1, 2, 3, test::make_nonce(0), test::make_nonce(9), 4};
  big.payload_len = 1000;
  auto payload = bytes_of(1000, 0);
  ASSERT_TRUE(encoder.encode_to(big, payload, bytes));
  ASSERT_TRUE(encoder.encode_to(big, payload, bytes));
  auto got = decode_stream(bytes, 333, limits);
  ASSERT_FALSE(got.error) << got.error.message();
  ASSERT_EQ(got.frames.size(), 3u);
  EXPECT_EQ(got.frames[2].header, big);
  EXPECT_EQ(got.frames[2].payload, payload);
}

// ---- errors: each from a hand-made input ----

std::error_code first_error(std::span<const std::byte> bytes, decoder_limits limits = {}) {
  return decode_stream(bytes, bytes.size(), limits).error;
}

TEST(stream_decoder, decoder_rejects_header_len_below_a_minimal_message) {
  auto bytes = test::frame_from_words(8, {0});
  EXPECT_EQ(first_error(bytes), errc::header_too_small);
}

TEST(stream_decoder, decoder_rejects_header_len_over_the_limit_before_it_arrives) {
  // Only the prefix is here: the verdict must not wait for 64 KiB that may never come.
  auto bytes = test::frame_from_words(65536, {});
  EXPECT_EQ(first_error(bytes), errc::header_too_large);
}

TEST(stream_decoder, decoder_rejects_header_len_that_is_not_whole_words) {
  auto bytes = test::frame_from_words(20, {});
  EXPECT_EQ(first_error(bytes), errc::header_misaligned);
}

TEST(stream_decoder, decoder_rejects_segment_sizes_that_disagree_with_header_len) {
  // One segment of 5 words claimed, 2 present.
  auto bytes = test::frame_from_words(24, {std::uint64_t{5} << 32, 0, 0});
  EXPECT_EQ(first_error(bytes), errc::bad_segment_table);
}

TEST(stream_decoder, decoder_rejects_an_absurd_segment_count) {
  auto bytes = test::frame_from_words(16, {0xffffffff, 0});
  EXPECT_EQ(first_error(bytes), errc::bad_segment_table);
}

TEST(stream_decoder, decoder_rejects_a_root_pointer_out_of_bounds_as_malformed) {
  // Struct pointer at offset 100 words, 3 data words: far past the 1-word segment.
  const std::uint64_t root = (std::uint64_t{100} << 2) | (std::uint64_t{3} << 32);
  auto bytes = test::frame_from_words(16, {std::uint64_t{1} << 32, root});
  EXPECT_EQ(first_error(bytes), errc::malformed_header);
}

TEST(stream_decoder, decoder_rejects_a_list_where_the_frame_struct_should_be) {
  const std::uint64_t list_pointer = 1;  // a list pointer (type 1), empty
  auto bytes = test::frame_from_words(16, {std::uint64_t{1} << 32, list_pointer});
  EXPECT_EQ(first_error(bytes), errc::malformed_header);
}

TEST(stream_decoder, decoder_rejects_a_newer_protocol_version) {
  capnp::MallocMessageBuilder builder;
  auto frame = builder.initRoot<schema::Frame>();
  frame.setVersion(protocol_version + 1);
  frame.initAck();
  EXPECT_EQ(first_error(test::frame_from_message(builder)), errc::unsupported_version);
}

TEST(stream_decoder, decoder_rejects_a_union_member_it_does_not_know) {
  capnp::MallocMessageBuilder builder;
  auto frame = builder.initRoot<schema::Frame>();
  frame.setVersion(protocol_version);
  frame.initAck();
  // The union tag lives at bits [160, 176) of Frame's data section (`capnp compile -ocapnp`).
  auto data = builder.getRoot<capnp::AnyStruct>().getDataSection();
  ASSERT_EQ(std::to_integer<int>(std::byte{data[20]}), 2);  // ack
  data[20] = 7;  // one past device, the last member this build knows
  EXPECT_EQ(first_error(test::frame_from_message(builder)), errc::unknown_kind);
}

TEST(stream_decoder, decoder_rejects_a_challenge_that_is_not_32_bytes) {
  capnp::MallocMessageBuilder builder;
  auto frame = builder.initRoot<schema::Frame>();
  frame.setVersion(protocol_version);
  frame.initHello().initChallenge(5);
  EXPECT_EQ(first_error(test::frame_from_message(builder)), errc::bad_field);
}

TEST(stream_decoder, decoder_rejects_a_response_that_is_not_32_bytes) {
  capnp::MallocMessageBuilder builder;
  auto frame = builder.initRoot<schema::Frame>();
  frame.setVersion(protocol_version);
  frame.initHello().initResponse(33);
  EXPECT_EQ(first_error(test::frame_from_message(builder)), errc::bad_field);
}

TEST(stream_decoder, decoder_rejects_oversized_payload_length_before_it_arrives) {
  frame_encoder encoder;
  frame_header header;
  header.body = credit_fields{1};
  header.payload_len = 2000;
  auto payload = bytes_of(2000, 0);
  ASSERT_TRUE(encoder.encode(header, payload));
  decoder_limits limits;
  limits.max_payload_bytes = 1999;
  // Header only: the payload never needs to arrive for the verdict.
  EXPECT_EQ(first_error(encoder.header_bytes(), limits), errc::payload_too_large);
}

std::error_code data_frame_error(data_fields d, std::uint32_t payload_len = 0,
                                 decoder_limits limits = {}) {
  frame_encoder encoder;
  frame_header header;
  header.body = d;
  header.payload_len = payload_len;
  auto payload = bytes_of(payload_len, 0);
  std::vector<std::byte> bytes;
  EXPECT_TRUE(encoder.encode_to(header, payload, bytes));
  return first_error(bytes, limits);
}

TEST(stream_decoder, decoder_rejects_a_zero_fragment_count) {
  EXPECT_EQ(data_frame_error({1, 2, 3, 4, 0, 0, 0, 0}), errc::bad_field);
}

TEST(stream_decoder, decoder_rejects_more_fragments_than_the_limit) {
  decoder_limits limits;
  limits.max_fragments = 8;
  EXPECT_EQ(data_frame_error({1, 2, 3, 4, 0, 9, 0, 0}, 0, limits), errc::too_many_fragments);
  EXPECT_FALSE(data_frame_error({1, 2, 3, 4, 7, 8, 0, 0}, 0, limits));
}

TEST(stream_decoder, decoder_rejects_a_fragment_index_past_its_count) {
  EXPECT_EQ(data_frame_error({1, 2, 3, 4, 5, 5, 0, 0}), errc::fragment_out_of_range);
}

TEST(stream_decoder, decoder_rejects_fragment_bytes_outside_the_message) {
  EXPECT_EQ(data_frame_error({1, 2, 3, 4, 1, 2, 100, 60}, 41), errc::fragment_out_of_range);
  EXPECT_EQ(data_frame_error({1, 2, 3, 4, 1, 2, 100, ~std::uint64_t{0}}, 41),
            errc::fragment_out_of_range);
  EXPECT_FALSE(data_frame_error({1, 2, 3, 4, 1, 2, 100, 60}, 40));
}

TEST(stream_decoder, poisoned_decoder_repeats_its_error_and_yields_no_more_frames) {
  auto bytes = test::frame_from_words(20, {});
  frame_encoder encoder;
  frame_header good;
  good.body = ack_fields{5};
  ASSERT_TRUE(encoder.encode_to(good, {}, bytes));
  stream_decoder decoder;
  decoder.feed(bytes);
  for (int i = 0; i < 3; ++i) {
    auto frame = decoder.next();
    ASSERT_FALSE(frame);
    EXPECT_EQ(frame.error(), errc::header_misaligned);
  }
  EXPECT_EQ(decoder.error(), errc::header_misaligned);
  // A valid frame fed later changes nothing: the stream is out of sync for good.
  std::vector<std::byte> more;
  ASSERT_TRUE(encoder.encode_to(good, {}, more));
  decoder.feed(more);
  EXPECT_EQ(decoder.next().error(), errc::header_misaligned);
}

TEST(stream_decoder, garbage_streams_never_crash_and_end_in_a_typed_error_or_a_wait) {
  std::mt19937_64 rng(7);
  decoder_limits limits;
  limits.max_payload_bytes = 1 << 12;
  int errors = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<std::byte> bytes(rng() % 200);
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    // A plausible prefix half the time, so that garbage reaches the Cap'n Proto reader.
    if (bytes.size() >= 4 && rng() % 2) {
      const auto len = static_cast<std::uint32_t>(8 * (2 + rng() % 20));
      for (int i = 0; i < 4; ++i) bytes[i] = static_cast<std::byte>(len >> (8 * i));
      if (bytes.size() >= 8) bytes[4] = bytes[5] = bytes[6] = bytes[7] = std::byte{0};
    }
    auto got = decode_stream(bytes, 1 + rng() % 16, limits);
    if (got.error) {
      EXPECT_EQ(&got.error.category(), &wire_category());
      ++errors;
    }
  }
  // Nearly every random stream is rejected; the few that are not are still waiting for bytes.
  EXPECT_GT(errors, 200);
}

}  // namespace
}  // namespace vessel::wire
