// The board's CRC-8 and frame codec (bridges/uart/board/vsl_crc8.h, vsl_frame.h) against the
// host's (wire/crc8.hpp, wire/serial_frame.hpp, wire/serial_decoder.hpp): same checksums, frames
// that cross over in both directions, and the same resynchronisation on the same damaged streams.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "bridges/uart/board/vsl_crc8.h"
#include "bridges/uart/board/vsl_frame.h"
#include "wire/crc8.hpp"
#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"
#include "wire/serial_timing.hpp"

namespace {

using bytes = std::vector<std::uint8_t>;
using std::chrono::milliseconds;

constexpr std::uint32_t timeout_ms = 10;

std::span<const std::byte> as_bytes(const bytes& b) { return std::as_bytes(std::span{b}); }

bytes c_frame(const bytes& payload) {
  bytes out(payload.size() + 3);
  EXPECT_EQ(vsl_frame_encode(payload.data(), payload.size(), out.data(), out.size()), out.size());
  return out;
}

bytes cat(std::initializer_list<bytes> parts) {
  bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

bytes random_bytes(std::mt19937& rng, std::size_t n) {
  bytes out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  return out;
}

// A byte stream as the line delivers it: chunks, each at a time in ms, and polls in between.
struct line_event {
  bytes chunk;  // empty: a poll
  std::uint32_t at_ms;
};

struct outcome {
  std::vector<bytes> frames;
  std::uint64_t frames_ok, crc_errors, bad_length, truncated, resync_bytes, bytes_in, buffered;
  bool operator==(const outcome&) const = default;
};

void PrintTo(const outcome& o, std::ostream* os) {
  *os << "{frames=" << o.frames.size() << " ok=" << o.frames_ok << " crc=" << o.crc_errors << " len=" << o.bad_length
      << " trunc=" << o.truncated << " resync=" << o.resync_bytes << " in=" << o.bytes_in << " buffered=" << o.buffered
      << "}";
}

outcome run_board(const std::vector<line_event>& events) {
  vsl_parser p;
  vsl_parser_init(&p, timeout_ms);
  outcome o{};
  auto drain = [&] {
    const std::uint8_t* payload = nullptr;
    int n;
    while ((n = vsl_parser_next(&p, &payload)) >= 0) o.frames.emplace_back(payload, payload + n);
  };
  for (const auto& e : events) {
    if (e.chunk.empty()) {
      vsl_parser_poll(&p, e.at_ms);
      drain();
      continue;
    }
    for (std::size_t pos = 0; pos < e.chunk.size();) {
      pos += vsl_parser_feed(&p, e.chunk.data() + pos, e.chunk.size() - pos, e.at_ms);
      drain();
    }
  }
  const auto& c = p.counters;
  o.frames_ok = c.frames_ok, o.crc_errors = c.crc_errors, o.bad_length = c.bad_length, o.truncated = c.truncated;
  o.resync_bytes = c.resync_bytes, o.bytes_in = c.bytes_in, o.buffered = vsl_parser_buffered(&p);
  return o;
}

outcome run_host(const std::vector<line_event>& events) {
  vessel::wire::serial_decoder d(milliseconds{timeout_ms});
  const vessel::wire::serial_decoder::clock::time_point t0{};
  outcome o{};
  auto drain = [&] {
    while (auto f = d.next()) {
      const auto* b = reinterpret_cast<const std::uint8_t*>(f->data());
      o.frames.emplace_back(b, b + f->size());
    }
  };
  for (const auto& e : events) {
    const auto now = t0 + milliseconds{e.at_ms};
    if (e.chunk.empty()) {
      d.poll(now);
      drain();
      continue;
    }
    std::span<const std::byte> rest = as_bytes(e.chunk);
    while (!rest.empty()) {
      rest = rest.subspan(d.feed(rest, now));
      drain();
    }
  }
  const auto& c = d.counters();
  o.frames_ok = c.frames_ok, o.crc_errors = c.crc_errors, o.bad_length = c.bad_length, o.truncated = c.truncated;
  o.resync_bytes = c.resync_bytes, o.bytes_in = c.bytes_in, o.buffered = d.buffered();
  return o;
}

// Runs both parsers over `events`, requires the same outcome, and returns it.
outcome run_both(const std::vector<line_event>& events) {
  const outcome board = run_board(events);
  const outcome host = run_host(events);
  EXPECT_EQ(board, host) << "the board parser and wire::serial_decoder disagree";
  EXPECT_TRUE(board.frames == host.frames);
  return board;
}

TEST(board_crc8, check_value_of_123456789_is_0xF4) {
  const char* check = "123456789";
  EXPECT_EQ(vsl_crc8(reinterpret_cast<const std::uint8_t*>(check), 9), 0xF4);
  EXPECT_EQ(vsl_crc8(nullptr, 0), 0x00);
}

TEST(board_crc8, equals_the_host_crc8_on_random_data_in_any_split) {
  std::mt19937 rng(8);
  for (int i = 0; i < 500; ++i) {
    const bytes data = random_bytes(rng, rng() % 300);
    const std::uint8_t host = vessel::wire::crc8(as_bytes(data));
    ASSERT_EQ(vsl_crc8(data.data(), data.size()), host);
    const std::size_t split = data.empty() ? 0 : rng() % data.size();
    ASSERT_EQ(vsl_crc8_update(vsl_crc8(data.data(), split), data.data() + split, data.size() - split), host);
  }
}

TEST(board_frame, encode_refuses_len_254_and_short_buffers) {
  bytes payload(254), out(300);
  EXPECT_EQ(vsl_frame_encode(payload.data(), 254, out.data(), out.size()), 0u);
  EXPECT_EQ(vsl_frame_encode(payload.data(), 253, out.data(), 255), 0u);
  EXPECT_EQ(vsl_frame_encode(payload.data(), 253, out.data(), 256), 256u);
}

TEST(board_frame, frames_encoded_by_the_board_decode_on_the_host_and_back) {
  std::mt19937 rng(2026);
  std::vector<bytes> payloads;
  bytes board_stream, host_stream;
  for (int i = 0; i < 400; ++i) {
    payloads.push_back(random_bytes(rng, rng() % 254));
    board_stream = cat({board_stream, c_frame(payloads.back())});
    bytes host_frame(payloads.back().size() + 3);
    auto n = vessel::wire::encode_serial_frame(as_bytes(payloads.back()), std::as_writable_bytes(std::span{host_frame}));
    ASSERT_TRUE(n);
    host_stream = cat({host_stream, host_frame});
  }
  EXPECT_EQ(board_stream, host_stream);  // byte-identical encodings
  // Board-encoded bytes through the host decoder, host-encoded bytes through the board parser.
  EXPECT_EQ(run_host({{board_stream, 0}}).frames, payloads);
  EXPECT_EQ(run_board({{host_stream, 0}}).frames, payloads);
}

TEST(board_frame, garbage_before_a_frame_is_skipped_as_resync_bytes) {
  const outcome o = run_both({{cat({{0x00, 0x55, 0x13}, c_frame({0x10, 0x20})}), 0}});
  EXPECT_EQ(o.frames, std::vector<bytes>{bytes({0x10, 0x20})});
  EXPECT_EQ(o.resync_bytes, 3u);
}

TEST(board_frame, start_bytes_inside_payloads_need_no_resync) {
  const std::vector<bytes> payloads{bytes(253, 0xAA), bytes(1, 0xAA), bytes{0xAA, 0xAA, 0x00}, bytes{}};
  bytes stream;
  for (const auto& p : payloads) stream = cat({stream, c_frame(p)});
  const outcome o = run_both({{stream, 0}});
  EXPECT_EQ(o.frames, payloads);
  EXPECT_EQ(o.crc_errors + o.resync_bytes, 0u);
}

TEST(board_frame, bad_crc_drops_only_the_start_byte_so_a_frame_hidden_inside_is_found) {
  bytes corrupt = c_frame(cat({c_frame({1, 2, 3}), {0x11, 0x22}}));
  corrupt.back() ^= 0x01;
  const outcome o = run_both({{corrupt, 0}});
  EXPECT_EQ(o.frames, std::vector<bytes>{bytes({1, 2, 3})});
  EXPECT_EQ(o.crc_errors, 1u);
  EXPECT_EQ(o.resync_bytes, 4u);
}

TEST(board_frame, stray_start_byte_holds_frames_back_then_loses_none) {
  std::mt19937 rng(170);
  std::vector<bytes> payloads;
  bytes stream{0xAA};
  for (int i = 0; i < 10; ++i) {
    payloads.push_back(random_bytes(rng, 20));
    stream = cat({stream, c_frame(payloads.back())});
  }
  const outcome o = run_both({{bytes(stream.begin(), stream.begin() + 100), 0}, {bytes(stream.begin() + 100, stream.end()), 1}});
  EXPECT_EQ(o.frames, payloads);
  EXPECT_EQ(o.crc_errors, 1u);
}

TEST(board_frame, length_254_and_255_are_rejected_at_once) {
  for (std::uint8_t len : {254, 255}) {
    const outcome o = run_both({{{0xAA, len}, 0}, {c_frame({0x42}), 0}});
    EXPECT_EQ(o.frames, std::vector<bytes>{bytes{0x42}});
    EXPECT_EQ(o.bad_length, 1u);
    EXPECT_EQ(o.resync_bytes, 1u);
  }
}

TEST(board_frame, a_partial_frame_is_truncated_by_poll_only_after_more_than_the_timeout) {
  const outcome before = run_both({{{0xAA, 0x05, 0x01, 0x02}, 0}, {{}, timeout_ms}});
  EXPECT_EQ(before.truncated, 0u);
  EXPECT_EQ(before.buffered, 4u);
  const outcome after = run_both({{{0xAA, 0x05, 0x01, 0x02}, 0}, {{}, timeout_ms + 1}, {c_frame({9}), 50}});
  EXPECT_EQ(after.truncated, 1u);
  EXPECT_EQ(after.resync_bytes, 3u);
  EXPECT_EQ(after.frames, std::vector<bytes>{bytes{9}});
}

TEST(board_frame, bytes_resuming_after_a_silence_truncate_the_partial_frame_without_poll) {
  const outcome o = run_both({{{0xAA, 0x05, 0x01, 0x02}, 0}, {c_frame({9, 8, 7}), 2 * timeout_ms}});
  EXPECT_EQ(o.frames, std::vector<bytes>{bytes({9, 8, 7})});
  EXPECT_EQ(o.truncated, 1u);
}

TEST(board_frame, truncating_a_partial_frame_finds_a_complete_frame_inside_it) {
  const outcome o = run_both({{cat({{0xAA, 0x0A}, c_frame({0x7F})}), 0}, {{}, 2 * timeout_ms}});
  EXPECT_EQ(o.frames, std::vector<bytes>{bytes{0x7F}});
  EXPECT_EQ(o.truncated, 1u);
}

TEST(board_frame, damaged_streams_with_random_chunks_and_silences_decode_identically_on_both_sides) {
  // 30 streams x 300 frames: bit flips, dropped and inserted bytes, stray start bytes, chunks of
  // 1..300 bytes, some gaps longer than the timeout. Both sides must agree on every frame and count.
  std::mt19937 rng(77);
  std::uint64_t total_frames = 0, total_errors = 0;
  for (int s = 0; s < 30; ++s) {
    bytes stream;
    for (int i = 0; i < 300; ++i) {
      bytes f = c_frame(random_bytes(rng, rng() % 254));
      switch (rng() % 12) {
        case 0: f[rng() % f.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8)); break;
        case 1: f.erase(f.begin() + static_cast<long>(rng() % f.size())); break;
        case 2: f.insert(f.begin() + static_cast<long>(rng() % f.size()), 0xAA); break;
        case 3: f.resize(rng() % f.size()); break;
        default: break;
      }
      stream = cat({stream, f});
    }
    std::vector<line_event> events;
    std::uint32_t now = 0;
    for (std::size_t pos = 0; pos < stream.size();) {
      const std::size_t n = std::min<std::size_t>(1 + rng() % 300, stream.size() - pos);
      now += rng() % 8 == 0 ? timeout_ms + 1 + rng() % 5 : rng() % 3;
      events.push_back({bytes(stream.begin() + static_cast<long>(pos), stream.begin() + static_cast<long>(pos + n)), now});
      if (rng() % 4 == 0) {
        now += static_cast<std::uint32_t>(rng() % (2 * timeout_ms));  // time only moves forward
        events.push_back({{}, now});
      }
      pos += n;
    }
    events.push_back({{}, now + 10 * timeout_ms});
    const outcome o = run_both(events);
    total_frames += o.frames_ok;
    total_errors += o.crc_errors + o.bad_length + o.truncated;
  }
  EXPECT_GT(total_frames, 4000u);
  EXPECT_GT(total_errors, 500u);
}

TEST(board_frame, read_timeout_matches_the_host_within_a_millisecond_and_never_below) {
  using vessel::wire::serial_read_timeout;
  for (std::uint32_t baud : {9600u, 19200u, 57600u, 115200u, 921600u}) {
    const auto host = std::chrono::duration_cast<std::chrono::nanoseconds>(
        serial_read_timeout(baud, vessel::wire::bits_per_char_8n1, vessel::wire::serial_max_frame_bytes));
    const auto board = milliseconds{vsl_read_timeout_ms(baud, 10, 256)};
    EXPECT_GE(board, host) << baud;
    EXPECT_LT(board - host, milliseconds{1}) << baud;
  }
  EXPECT_EQ(vsl_read_timeout_ms(115200, 10, 256), 65u);   // 44.44 ms -> 45 + 20
  EXPECT_EQ(vsl_read_timeout_ms(9600, 10, 256), 554u);    // 533.33 ms -> 534 + 20
  EXPECT_EQ(vsl_frame_time_ms(115200, 10, 256), 23u);     // 22.2 ms, rounded up
}

}  // namespace
