// The host's reliable mode (bridges/uart/reliable_channel.hpp) against the board library's
// (bridges/uart/board/vessel_serial.c), byte for byte, through a simulated line that flips bits,
// on a simulated clock: both sides deliver every message exactly once, in order. Also the link
// header's check against the board's, the retransmit timeout math, and the command layout.

#include "bridges/uart/reliable_channel.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "bridges/uart/board/vessel_serial.h"
#include "bridges/uart/command.hpp"
#include "bridges/uart/errc.hpp"
#include "bridges/uart/link_header.hpp"
#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"

namespace vessel::bridges::uart {
namespace {

using namespace std::chrono_literals;
using clock_type = reliable_channel::clock;

std::span<const std::byte> as_bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST(uart_link_header, check_matches_the_board_and_the_catalogue) {
  // CRC-8/AUTOSAR check value: "123456789" -> 0xDF; our check = crc over header byte then body.
  const std::string nine = "123456789";
  EXPECT_EQ(link_check(static_cast<std::uint8_t>('1'), as_bytes_of(nine.substr(1))), 0xDF);
  std::mt19937 rng{7};
  for (int i = 0; i < 200; ++i) {
    std::vector<std::uint8_t> body(rng() % 40);
    for (auto& b : body) b = static_cast<std::uint8_t>(rng());
    const auto h = static_cast<std::uint8_t>(rng());
    std::uint8_t crc = vsl_crc8_autosar_update(VSL_CRC8_AUTOSAR_INIT, &h, 1);
    crc = static_cast<std::uint8_t>(vsl_crc8_autosar_update(crc, body.data(), body.size()) ^ 0xFF);
    EXPECT_EQ(link_check(h, {reinterpret_cast<const std::byte*>(body.data()), body.size()}), crc);
  }
}

TEST(uart_link_timing, retransmit_timeout_matches_the_board_and_scales_with_frame_time) {
  for (const std::uint32_t baud : {9600u, 115200u}) {
    for (const std::size_t frame : {std::size_t{5}, std::size_t{64}, std::size_t{256}}) {
      const auto host = retransmit_timeout(baud, 10, frame, VSL_WINDOW);
      const auto board = std::chrono::milliseconds{vsl_rto_ms(baud, 10, static_cast<std::uint32_t>(frame))};
      EXPECT_LE(host, board) << baud << " " << frame;  // the board rounds up to whole ms
      EXPECT_GT(host, board - 1ms) << baud << " " << frame;
    }
  }
  // docs/uart.md: 256-byte frame, W = 4: 244 ms at 115200, 2698 ms at 9600 (board, whole ms).
  EXPECT_EQ(std::chrono::ceil<std::chrono::milliseconds>(retransmit_timeout(115200, 10, 256)), 244ms);
  EXPECT_EQ(std::chrono::ceil<std::chrono::milliseconds>(retransmit_timeout(9600, 10, 256)), 2698ms);
  // Less the floor, the timeout is proportional to the frame time: 12x the bits take 12x as long.
  const auto at = [](std::uint32_t baud, std::size_t frame) {
    return retransmit_timeout(baud, 10, frame) - wire::serial_timeout_floor;
  };
  for (const std::size_t frame : {std::size_t{5}, std::size_t{256}}) {
    const double ratio = static_cast<double>(at(9600, frame).count()) / static_cast<double>(at(115200, frame).count());
    EXPECT_NEAR(ratio, 12.0, 1e-6);
    EXPECT_EQ(at(9600, frame), wire::serial_frame_time(9600, 10, 2 * (frame + 5 + 4 * 256)));
  }
  // A longer frame waits longer, by exactly twice its extra line time.
  EXPECT_EQ(at(115200, 256) - at(115200, 5),
            wire::serial_frame_time(115200, 10, 2 * 256) - wire::serial_frame_time(115200, 10, 2 * 5));
}

TEST(uart_command, request_reply_and_event_layouts_round_trip) {
  std::array<std::byte, link_max_message> buf{};
  const std::string body = "hello";
  auto n = encode_request(0x01, 0x1234, as_bytes_of(body), buf);
  ASSERT_TRUE(n);
  EXPECT_EQ(n.value(), 3 + body.size());
  EXPECT_EQ(buf[0], std::byte{0x01});
  EXPECT_EQ(buf[1], std::byte{0x34});  // little endian
  EXPECT_EQ(buf[2], std::byte{0x12});
  auto m = parse_message({buf.data(), n.value()});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->what, board_message::kind::request);

  n = encode_reply(0x01, 0x1234, reply_status::ok, as_bytes_of(body), buf);
  ASSERT_TRUE(n);
  m = parse_message({buf.data(), n.value()});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->what, board_message::kind::reply);
  EXPECT_EQ(m->command, 0x01);
  EXPECT_EQ(m->request_id, 0x1234);
  EXPECT_EQ(m->status, 0);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->body.data()), m->body.size()), body);

  n = encode_event(0x10, as_bytes_of(body), buf);
  m = parse_message({buf.data(), n.value()});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->what, board_message::kind::event);
  EXPECT_EQ(m->command, 0x10);

  EXPECT_EQ(encode_request(0x80, 1, {}, buf).error(), errc::bad_command);
  const std::vector<std::byte> big(max_request_body + 1);
  EXPECT_EQ(encode_request(0x01, 1, big, buf).error(), errc::message_too_large);
  EXPECT_FALSE(parse_message({buf.data(), 2}));
  EXPECT_EQ(status_error(1), errc::unknown_command);
  EXPECT_EQ(status_error(9), errc::device_error);
  EXPECT_FALSE(status_error(0));
}

// A host channel and a board context joined by a simulated line with bit flips, on a simulated
// millisecond clock that the test advances.
class sim_line : public channel_sink {
 public:
  sim_line(double flip_rate, std::uint64_t seed, unsigned window)
      : rng_(seed), flip_rate_(flip_rate), decoder_(115200, 10),
        host_(make_config(window), *this) {
    vsl_ring_init(&ring_, ring_storage_, sizeof ring_storage_);
    vsl_config cfg{};
    cfg.baud = 115200;
    cfg.bits_per_char = 10;
    cfg.rx = &ring_;
    cfg.write = [](void* u, const std::uint8_t* b, std::size_t n) { static_cast<sim_line*>(u)->board_wrote(b, n); };
    cfg.deliver = [](void* u, const std::uint8_t* p, std::size_t n, bool reliable) {
      static_cast<sim_line*>(u)->board_got(p, n, reliable);
    };
    cfg.user = this;
    cfg.session = 0x5A;
    EXPECT_EQ(vsl_init(&board_, &cfg, 0), VSL_OK);
    host_.start(0x33, now());
  }

  static reliable_channel_config make_config(unsigned window) {
    reliable_channel_config c;
    c.window = window;
    return c;
  }

  clock_type::time_point now() const { return clock_type::time_point{} + std::chrono::milliseconds{ms_}; }

  // One millisecond of the line: bytes in flight arrive, both sides poll.
  void step() {
    ++ms_;
    const auto t = now();
    for (auto& chunk : to_board_) {
      vsl_rx_push_chunk(&ring_, chunk.data(), chunk.size());
    }
    to_board_.clear();
    vsl_poll(&board_, ms_);
    for (auto& chunk : to_host_) {
      std::span<const std::byte> rest{reinterpret_cast<const std::byte*>(chunk.data()), chunk.size()};
      while (!rest.empty()) {
        rest = rest.subspan(decoder_.feed(rest, t));
        while (auto p = decoder_.next()) host_.on_link_payload(*p, t);
      }
    }
    to_host_.clear();
    decoder_.poll(t);
    while (auto p = decoder_.next()) host_.on_link_payload(*p, t);
    host_.poll(t);
  }

  // channel_sink
  void write_link_payload(std::span<const std::byte> payload) override {
    std::array<std::byte, wire::serial_max_frame_bytes> f;
    const auto n = wire::encode_serial_frame(payload, f);
    ASSERT_TRUE(n);
    to_board_.push_back(damage(reinterpret_cast<const std::uint8_t*>(f.data()), n.value()));
  }
  void deliver(std::span<const std::byte> m, bool reliable) override {
    host_got.emplace_back(reinterpret_cast<const char*>(m.data()), m.size());
    host_got_reliable += reliable ? 1 : 0;
  }

  void board_wrote(const std::uint8_t* b, std::size_t n) { to_host_.push_back(damage(b, n)); }
  void board_got(const std::uint8_t* p, std::size_t n, bool reliable) {
    board_got_.emplace_back(reinterpret_cast<const char*>(p), n);
    board_got_reliable += reliable ? 1 : 0;
  }

  std::vector<std::uint8_t> damage(const std::uint8_t* b, std::size_t n) {
    std::vector<std::uint8_t> out(b, b + n);
    for (auto& x : out) {
      if (std::uniform_real_distribution<double>{}(rng_) < flip_rate_) {
        x = static_cast<std::uint8_t>(x ^ (1u << (rng_() % 8)));
        ++flips;
      }
    }
    return out;
  }

  std::mt19937_64 rng_;
  double flip_rate_;
  std::uint64_t ms_ = 0;
  std::uint8_t ring_storage_[4096];
  vsl_ring ring_{};
  vsl_ctx board_{};
  wire::serial_decoder decoder_;
  reliable_channel host_;
  std::deque<std::vector<std::uint8_t>> to_board_, to_host_;
  std::vector<std::string> host_got, board_got_;
  std::size_t host_got_reliable = 0, board_got_reliable = 0;
  std::size_t flips = 0;
};

// Both directions at once: the host sends `n` numbered messages, the board `n` of its own.
void run_both_ways(double flip_rate, unsigned window, int n, std::uint64_t seed) {
  sim_line line{flip_rate, seed, window};
  int host_sent = 0, board_sent = 0;
  for (int guard = 0; guard < 2'000'000; ++guard) {
    while (host_sent < n) {
      const std::string m = "h" + std::to_string(host_sent);
      if (!line.host_.send(as_bytes_of(m), line.now())) break;
      ++host_sent;
    }
    while (board_sent < n) {
      const std::string m = "b" + std::to_string(board_sent);
      if (vsl_send(&line.board_, reinterpret_cast<const std::uint8_t*>(m.data()), m.size()) != VSL_OK) break;
      ++board_sent;
    }
    line.step();
    if (static_cast<int>(line.board_got_.size()) >= n && static_cast<int>(line.host_got.size()) >= n &&
        line.host_.in_flight() == 0 && line.board_.tx_count == 0) {
      break;
    }
  }
  ASSERT_EQ(line.board_got_.size(), static_cast<std::size_t>(n)) << "flips " << line.flips;
  ASSERT_EQ(line.host_got.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(line.board_got_[static_cast<std::size_t>(i)], "h" + std::to_string(i));
    ASSERT_EQ(line.host_got[static_cast<std::size_t>(i)], "b" + std::to_string(i));
  }
  EXPECT_EQ(line.board_got_reliable, static_cast<std::size_t>(n));
  EXPECT_EQ(line.host_.stats().delivered_reliable, static_cast<std::uint64_t>(n));
  if (flip_rate > 0) {
    EXPECT_GT(line.flips, 0u);
    EXPECT_GT(line.host_.stats().retransmitted_frames + line.board_.stats.retransmitted_frames, 0u);
  } else {
    EXPECT_EQ(line.host_.stats().retransmitted_frames, 0u);
    EXPECT_EQ(line.board_.stats.retransmitted_frames, 0u);
  }
}

TEST(uart_reliable_channel, clean_line_delivers_both_ways_without_retransmits) {
  run_both_ways(0.0, 4, 500, 1);
}

TEST(uart_reliable_channel, noisy_line_delivers_every_message_once_in_order_window_1) {
  run_both_ways(0.01, 1, 400, 2);
}

TEST(uart_reliable_channel, noisy_line_delivers_every_message_once_in_order_window_4) {
  run_both_ways(0.01, 4, 2000, 3);
}

TEST(uart_reliable_channel, very_noisy_line_still_delivers_exactly_once) {
  run_both_ways(0.05, 4, 300, 4);
}

TEST(uart_reliable_channel, window_full_pushes_back_and_too_large_is_refused) {
  sim_line line{0.0, 5, 2};
  // The SYN of start() holds one of the 2 slots until acked.
  EXPECT_TRUE(line.host_.send(as_bytes_of("a"), line.now()));
  EXPECT_EQ(line.host_.send(as_bytes_of("b"), line.now()).error(), errc::window_full);
  const std::vector<std::byte> big(link_max_message + 1);
  EXPECT_EQ(line.host_.send_unreliable(big).error(), errc::message_too_large);
  line.step();
  line.step();
  EXPECT_EQ(line.host_.send_room(), 2u);
  EXPECT_TRUE(line.host_.send(as_bytes_of("b"), line.now()));
}

TEST(uart_reliable_channel, a_restarted_host_resyncs_with_a_running_board) {
  sim_line line{0.0, 6, 4};
  for (int i = 0; i < 5; ++i) {
    const std::string m = "x" + std::to_string(i);
    ASSERT_EQ(vsl_send(&line.board_, reinterpret_cast<const std::uint8_t*>(m.data()), m.size()), VSL_OK);
    for (int k = 0; k < 3; ++k) line.step();
  }
  ASSERT_EQ(line.host_got.size(), 5u);
  // The host restarts (a reopen): new session, no receive state; the board keeps running.
  line.host_.start(0x34, line.now());
  for (int i = 5; i < 10; ++i) {
    const std::string m = "x" + std::to_string(i);
    while (vsl_send(&line.board_, reinterpret_cast<const std::uint8_t*>(m.data()), m.size()) != VSL_OK) line.step();
    for (int k = 0; k < 3; ++k) line.step();
  }
  for (int k = 0; k < 2000 && line.host_got.size() < 10; ++k) line.step();
  // Every payload sent after the restart arrives, in order (those in flight may come twice).
  ASSERT_GE(line.host_got.size(), 10u);
  EXPECT_EQ(line.host_got.back(), "x9");
  EXPECT_GE(line.board_.stats.syn_requests, 1u);
  // And the host's own new stream is taken as a new one by the board.
  EXPECT_TRUE(line.host_.send(as_bytes_of("after"), line.now()));
  for (int k = 0; k < 500 && line.board_got_.empty(); ++k) line.step();
  ASSERT_EQ(line.board_got_.size(), 1u);
  EXPECT_EQ(line.board_got_[0], "after");
}

}  // namespace
}  // namespace vessel::bridges::uart
