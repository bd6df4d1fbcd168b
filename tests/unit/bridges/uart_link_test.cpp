// uart_link (bridges/uart/uart_link.hpp) against the virtual board (the board library on a pty,
// bridges/uart/virtual_board): commands, telemetry, 10,000 calls through a line corrupting 1% of
// bytes in both directions, unplug and replug mid-stream, a hung board, and pacing.
//
// The reactor is driven from the test thread, so callbacks need no locks; the board runs on its
// own thread. The corrupted-line and unplug tests run unpaced with the board's clock sped up and
// a 1 ms timeout floor on the host (a pty has no USB-adapter latency): CI time, not line time.

#include "bridges/uart/uart_link.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "bridges/uart/errc.hpp"
#include "bridges/uart/virtual_board/virtual_board.hpp"
#include "io/errc.hpp"

namespace vessel::bridges::uart {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

std::vector<std::byte> le32(std::uint32_t v) {
  return {std::byte(v & 0xFF), std::byte((v >> 8) & 0xFF), std::byte((v >> 16) & 0xFF), std::byte(v >> 24)};
}
std::uint32_t get32(std::span<const std::byte> b) {
  return static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) |
         (static_cast<std::uint32_t>(b[2]) << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
}

class uart_link_test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vessel_uart_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    io::reactor_config rc;
    rc.own_thread = false;
    reactor_ = std::make_unique<io::reactor>(rc);
    ASSERT_TRUE(reactor_->start().has_value());
  }

  void TearDown() override {
    if (link_ && link_->state() != link_state::closed) {
      link_->close();
      run_until([&] { return link_->state() == link_state::closed; }, 5s);
    }
    reactor_->stop();
    while (reactor_->run_once(10ms)) {
    }
    link_.reset();
    board_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A fast board: unpaced, its clock 20x real time (retransmit timeout ~1.5 ms at 4 Mbaud).
  virtual_board_config fast_board(double flip_rate = 0, std::uint64_t seed = 1) {
    virtual_board_config c;
    c.link = dir_ / "ttyBOARD";
    c.baud = 4'000'000;
    c.paced = false;
    c.time_scale = 20;
    c.faults.bit_flip_rate = flip_rate;
    c.faults.seed = seed;
    return c;
  }

  uart_link_config fast_link(std::uint32_t baud = 4'000'000) {
    uart_link_config c;
    c.serial.path = (dir_ / "ttyBOARD").string();
    c.serial.baud = baud;
    c.channel.rto_floor = 1ms;
    c.reopen = io::reconnect_policy{2ms, 20ms, 2.0, 0, false};
    c.session = 0x40;
    return c;
  }

  void start_board(virtual_board_config c) {
    board_ = std::make_unique<virtual_board>(std::move(c));
    board_->start();
  }

  void open_link(uart_link_config c) {
    auto l = uart_link::open(*reactor_, std::move(c));
    ASSERT_TRUE(l.has_value()) << l.error().message();
    link_ = std::move(l).value();
    link_->on_state([this](link_state s, std::error_code why) { states_.emplace_back(s, why); });
  }

  template <class Pred>
  bool run_until(Pred pred, clock_type::duration timeout) {
    const auto deadline = clock_type::now() + timeout;
    while (!pred()) {
      if (clock_type::now() > deadline) return false;
      reactor_->run_once(1ms);
    }
    return true;
  }

  // One call, run to completion.
  result<std::vector<std::byte>> call_sync(std::uint8_t cmd, std::span<const std::byte> body,
                                           clock_type::duration timeout = 2s) {
    std::optional<result<std::vector<std::byte>>> out;
    const auto id = link_->call(cmd, body, timeout, [&](result<std::span<const std::byte>> r) {
      if (r) {
        out.emplace(std::vector<std::byte>(r.value().begin(), r.value().end()));
      } else {
        out.emplace(r.error());
      }
    });
    if (!id) return id.error();
    EXPECT_TRUE(run_until([&] { return out.has_value(); }, timeout + 5s));
    if (!out) return std::make_error_code(std::errc::timed_out);
    return std::move(*out);
  }

  std::filesystem::path dir_;
  std::unique_ptr<io::reactor> reactor_;
  std::unique_ptr<virtual_board> board_;
  std::unique_ptr<uart_link> link_;
  std::vector<std::pair<link_state, std::error_code>> states_;
};

TEST_F(uart_link_test, board_commands_answer_and_errors_are_typed) {
  start_board(fast_board());
  open_link(fast_link());
  const std::vector<std::byte> hello{std::byte{'h'}, std::byte{'i'}};
  auto r = call_sync(board_command::echo, hello);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r.value(), hello);

  auto args = le32(40);
  const auto b = le32(0xFFFFFFFFu);  // -1: 40 + -1 = 39
  args.insert(args.end(), b.begin(), b.end());
  r = call_sync(board_command::add, args);
  ASSERT_TRUE(r);
  EXPECT_EQ(get32(r.value()), 39u);

  r = call_sync(board_command::read_sensor, std::vector<std::byte>{std::byte{0}});
  ASSERT_TRUE(r);
  const auto milli = static_cast<std::int32_t>(get32(r.value()));
  EXPECT_GE(milli, 20500);
  EXPECT_LE(milli, 21500);

  EXPECT_EQ(call_sync(board_command::read_sensor, std::vector<std::byte>{std::byte{7}}).error(),
            errc::bad_request);
  EXPECT_EQ(call_sync(board_command::add, hello).error(), errc::bad_request);
  EXPECT_EQ(call_sync(0x7E, {}).error(), errc::unknown_command);
  EXPECT_EQ(link_->call(0x81, {}, 1s, nullptr).error(), errc::bad_command);
  const std::vector<std::byte> big(max_request_body + 1);
  EXPECT_EQ(link_->call(board_command::echo, big, 1s, nullptr).error(), errc::message_too_large);

  // Fire-and-forget: the board runs it, nothing comes back.
  const auto before = board_->stats().requests;
  ASSERT_TRUE(link_->send(board_command::echo, hello));
  ASSERT_TRUE(run_until([&] { return board_->stats().requests == before + 1; }, 5s));
  const auto c = link_->counters();
  EXPECT_EQ(c.sends, 1u);
  EXPECT_EQ(c.calls, 6u);  // the two refused at once are not calls
  EXPECT_EQ(c.replies, 6u);
  EXPECT_EQ(c.late_replies, 0u);
  EXPECT_EQ(c.crc_errors, 0u);
}

TEST_F(uart_link_test, telemetry_reaches_subscribers_until_they_unsubscribe) {
  start_board(fast_board());
  open_link(fast_link());
  std::vector<std::uint32_t> samples;
  const auto sub = link_->subscribe([&](std::uint8_t topic, std::span<const std::byte> body) {
    EXPECT_EQ(topic, telemetry_topic);
    ASSERT_EQ(body.size(), 8u);
    samples.push_back(get32(body));
  });
  std::uint16_t hz = 200;
  ASSERT_TRUE(call_sync(board_command::telemetry,
                        std::vector<std::byte>{std::byte(hz & 0xFF), std::byte(hz >> 8)}));
  ASSERT_TRUE(run_until([&] { return samples.size() >= 10; }, 10s));
  for (std::size_t i = 1; i < samples.size(); ++i) EXPECT_GT(samples[i], samples[i - 1]);
  link_->unsubscribe(sub);
  const auto seen = samples.size();
  const auto events = link_->counters().events;
  ASSERT_TRUE(run_until([&] { return link_->counters().events >= events + 5; }, 10s));
  EXPECT_EQ(samples.size(), seen);
}

// The proof: 10,000 request/responses through a line that flips a bit in 1% of the bytes,
// both directions. Every call is answered exactly once with its own body; the board ran each
// request exactly once; what the host detected matches what the board injected.
TEST_F(uart_link_test, ten_thousand_calls_through_one_percent_corruption_each_answered_once) {
  constexpr std::uint32_t total = 10'000;
  constexpr std::uint32_t outstanding = 16;
  // The board boots only once the host has opened the port: the open flushes what the tty
  // holds, and frames lost that way would blur the frame accounting below.
  board_ = std::make_unique<virtual_board>(fast_board(0.01, 20261129));
  auto cfg = fast_link();
  cfg.channel.window = 8;
  open_link(cfg);
  board_->start();

  std::vector<std::uint8_t> answered(total, 0);
  std::uint32_t made = 0, done = 0, wrong = 0, failed = 0;
  std::function<void()> make_call = [&] {
    const std::uint32_t n = made++;
    const auto body = le32(n);
    const auto id = link_->call(board_command::echo, body, 30s, [&, n](result<std::span<const std::byte>> r) {
      ++done;
      if (!r) {
        ++failed;
        ADD_FAILURE() << "call " << n << ": " << r.error().message();
      } else if (r.value().size() != 4 || get32(r.value()) != n) {
        ++wrong;
      } else {
        ++answered[n];
      }
      if (made < total) make_call();
    });
    ASSERT_TRUE(id.has_value()) << id.error().message();
  };
  for (std::uint32_t i = 0; i < outstanding; ++i) make_call();
  ASSERT_TRUE(run_until([&] { return done == total; }, 240s)) << done << " of " << total;

  EXPECT_EQ(failed, 0u);
  EXPECT_EQ(wrong, 0u);
  for (std::uint32_t i = 0; i < total; ++i) ASSERT_EQ(answered[i], 1) << "call " << i;

  // Stop the board, then read what it wrote until the line is quiet, so that both sides count
  // the same frames.
  ASSERT_TRUE(run_until([&] { return link_->channel().in_flight() == 0; }, 10s));
  board_->stop();
  for (std::uint64_t seen = ~0ull; seen != link_->counters().bytes_in;) {
    seen = link_->counters().bytes_in;
    const auto quiet = clock_type::now() + 100ms;
    run_until([&] { return clock_type::now() > quiet; }, 1s);
  }

  const auto host = link_->counters();
  const auto board = board_->stats();
  EXPECT_EQ(host.calls, total);
  EXPECT_EQ(host.replies, total);
  EXPECT_EQ(host.late_replies, 0u);  // the board answered each request once
  EXPECT_EQ(host.call_timeouts, 0u);
  EXPECT_EQ(board.requests, total);  // exactly once on the board too
  EXPECT_EQ(board.link.delivered_reliable, total);

  // The line: about 1% of bytes flipped each way.
  const double to_host_rate = static_cast<double>(board.to_host.bits_flipped) / static_cast<double>(board.to_host.bytes);
  const double from_host_rate = static_cast<double>(board.from_host.bits_flipped) / static_cast<double>(board.from_host.bytes);
  EXPECT_NEAR(to_host_rate, 0.01, 0.002);
  EXPECT_NEAR(from_host_rate, 0.01, 0.002);

  // Board -> host: no damaged frame was accepted (the frame CRC and the link check catch every
  // one), each damaged frame whose start byte survived left a rejected candidate, and an intact
  // frame was lost only inside a bogus candidate: one the frame CRC passed (1 in 256) and the
  // link layer refused (bad_check, or bad_header when under 2 bytes). A bogus candidate is
  // consumed whole, up to 256 bytes, so it may swallow up to 51 of the smallest (5-byte) frames.
  const std::uint64_t bogus = host.bad_check + host.bad_header;
  const std::uint64_t real_frames = host.frames_in - bogus;
  const std::uint64_t intact = board.to_host.frames - board.to_host.frames_damaged;
  EXPECT_LE(real_frames, intact);
  EXPECT_LE(intact - real_frames, bogus * (wire::serial_max_frame_bytes / link_ack_frame_bytes));
  EXPECT_GE(host.crc_errors + host.bad_length + host.truncated + host.bad_check,
            board.to_host.frames_damaged - board.to_host.start_bytes_hit);
  // Both senders had to retransmit: each side lost frames to the other's corruption.
  EXPECT_GT(host.retransmits, 0u);
  EXPECT_GT(board.link.retransmitted_frames, 0u);
  EXPECT_GT(board.parser.crc_errors + board.parser.bad_length + board.parser.truncated, 0u);
  std::printf(
      "[ stats    ] host: frames_in %llu crc_errors %llu bad_length %llu truncated %llu resync %llu "
      "bad_check %llu bad_header %llu retransmits %llu (fast %llu, timeouts %llu) | board: frames %llu damaged %llu "
      "flips to host %llu from host %llu, retransmits %u\n",
      static_cast<unsigned long long>(host.frames_in), static_cast<unsigned long long>(host.crc_errors),
      static_cast<unsigned long long>(host.bad_length), static_cast<unsigned long long>(host.truncated),
      static_cast<unsigned long long>(host.resync_bytes), static_cast<unsigned long long>(host.bad_check),
      static_cast<unsigned long long>(host.bad_header), static_cast<unsigned long long>(host.retransmits), static_cast<unsigned long long>(host.fast_retransmits),
      static_cast<unsigned long long>(host.rto_timeouts), static_cast<unsigned long long>(board.to_host.frames),
      static_cast<unsigned long long>(board.to_host.frames_damaged),
      static_cast<unsigned long long>(board.to_host.bits_flipped),
      static_cast<unsigned long long>(board.from_host.bits_flipped), board.link.retransmitted_frames);
}

// Calls stream while the board is unplugged and plugged back in: the link reports down then up,
// reopens by itself, and every call completes exactly once with its own reply.
TEST_F(uart_link_test, unplug_and_replug_mid_stream_recovers_and_completes_every_call) {
  constexpr std::uint32_t total = 600;
  start_board(fast_board());
  open_link(fast_link());
  std::vector<std::uint8_t> answered(total, 0);
  std::uint32_t made = 0, done = 0, failed = 0;
  bool unplugged = false;
  std::function<void()> make_call = [&] {
    const std::uint32_t n = made++;
    const auto id = link_->call(board_command::echo, le32(n), 10s, [&, n](result<std::span<const std::byte>> r) {
      ++done;
      if (!r) {
        ++failed;
        ADD_FAILURE() << "call " << n << ": " << r.error().message();
      } else if (get32(r.value()) == n) {
        ++answered[n];
      }
      if (done == 200 && !unplugged) {
        unplugged = true;
        board_->unplug(100ms);
      }
      if (made < total) make_call();
    });
    ASSERT_TRUE(id.has_value()) << id.error().message();
  };
  for (int i = 0; i < 8; ++i) make_call();
  ASSERT_TRUE(run_until([&] { return done == total; }, 60s)) << done;
  EXPECT_EQ(failed, 0u);
  for (std::uint32_t i = 0; i < total; ++i) ASSERT_EQ(answered[i], 1) << "call " << i;
  const auto c = link_->counters();
  EXPECT_EQ(c.unplugs, 1u);
  EXPECT_EQ(c.reopens, 1u);
  EXPECT_EQ(c.late_replies + c.replies, c.replies + c.late_replies);
  ASSERT_GE(states_.size(), 2u);
  EXPECT_EQ(states_[0].first, link_state::down);
  EXPECT_EQ(states_[0].second, io::errc::device_unplugged);
  EXPECT_EQ(states_[1].first, link_state::up);
  EXPECT_EQ(board_->stats().boots, 2u);
  // Across the replug the board may have run a resent request a second time (at-least-once for
  // calls in flight at the unplug), never fewer than once.
  EXPECT_GE(board_->stats().requests, total);
}

TEST_F(uart_link_test, unplug_without_retry_fails_calls_in_flight_clearly) {
  start_board(fast_board());
  auto cfg = fast_link();
  cfg.retry_in_flight = false;
  open_link(cfg);
  ASSERT_TRUE(call_sync(board_command::echo, le32(1)));
  // The board hangs (so calls stay in flight), then is unplugged.
  board_->hang(300ms);
  std::map<std::uint32_t, std::error_code> outcome;
  for (std::uint32_t n = 0; n < 4; ++n) {
    ASSERT_TRUE(link_->call(board_command::echo, le32(n), 10s, [&, n](result<std::span<const std::byte>> r) {
      outcome[n] = r ? std::error_code{} : r.error();
    }));
  }
  reactor_->run_once(5ms);
  board_->unplug(50ms);
  ASSERT_TRUE(run_until([&] { return outcome.size() == 4; }, 10s));
  for (const auto& [n, ec] : outcome) EXPECT_EQ(ec, errc::device_unplugged) << n;
  EXPECT_EQ(link_->counters().calls_failed, 4u);
  // And the link comes back by itself.
  ASSERT_TRUE(run_until([&] { return link_->state() == link_state::up && link_->counters().reopens == 1; }, 10s));
  auto r = call_sync(board_command::echo, le32(9));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(get32(r.value()), 9u);
}

TEST_F(uart_link_test, a_hung_board_times_calls_out_and_the_link_recovers) {
  start_board(fast_board());
  open_link(fast_link());
  ASSERT_TRUE(call_sync(board_command::echo, le32(1)));
  board_->hang(400ms);
  EXPECT_EQ(call_sync(board_command::echo, le32(2), 50ms).error(), errc::call_timeout);
  EXPECT_EQ(link_->counters().call_timeouts, 1u);
  // After the hang the board runs the late request (exactly once); its reply finds no call.
  ASSERT_TRUE(run_until([&] { return link_->counters().late_replies == 1; }, 10s));
  auto r = call_sync(board_command::echo, le32(3));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(get32(r.value()), 3u);
  EXPECT_EQ(link_->state(), link_state::up);
}

TEST_F(uart_link_test, a_device_that_never_comes_back_fails_calls_with_device_gone) {
  start_board(fast_board());
  auto cfg = fast_link();
  cfg.reopen.max_attempts = 3;
  open_link(cfg);
  ASSERT_TRUE(call_sync(board_command::echo, le32(1)));
  board_->hang(10s);
  std::optional<std::error_code> outcome;
  ASSERT_TRUE(link_->call(board_command::echo, le32(2), 10s, [&](result<std::span<const std::byte>> r) {
    outcome = r ? std::error_code{} : r.error();
  }));
  board_->stop();
  board_.reset();  // unplugged for good: the pty closes, the link disappears
  ASSERT_TRUE(run_until([&] { return outcome.has_value(); }, 10s));
  EXPECT_EQ(*outcome, errc::device_gone);
  EXPECT_EQ(link_->state(), link_state::closed);
  EXPECT_EQ(link_->call(board_command::echo, {}, 1s, nullptr).error(), errc::link_closed);
}

TEST_F(uart_link_test, unreliable_mode_answers_calls_over_a_clean_line) {
  start_board(fast_board());
  auto cfg = fast_link();
  cfg.reliable = false;
  open_link(cfg);
  for (std::uint32_t n = 0; n < 200; ++n) {
    auto r = call_sync(board_command::echo, le32(n));
    ASSERT_TRUE(r) << n << ": " << r.error().message();
    ASSERT_EQ(get32(r.value()), n);
  }
  EXPECT_EQ(link_->channel().stats().sent_unreliable, 200u);
  EXPECT_EQ(link_->channel().stats().sent_reliable, 0u);
}

TEST_F(uart_link_test, timeouts_derive_from_the_baud_rate) {
  auto board_cfg = fast_board();
  board_cfg.baud = 9600;
  start_board(board_cfg);
  auto cfg = fast_link(9600);
  cfg.channel.rto_floor = wire::serial_timeout_floor;
  open_link(cfg);
  // docs/uart.md: 256-byte frame 2698 ms at 9600, 244 ms at 115200 (the board's whole ms).
  EXPECT_EQ(std::chrono::ceil<std::chrono::milliseconds>(link_->retransmit_timeout(256)), 2698ms);
  EXPECT_EQ(link_->tick(), std::chrono::ceil<std::chrono::nanoseconds>(link_->retransmit_timeout(5) / 8));
  const auto slow = link_->retransmit_timeout(64) - wire::serial_timeout_floor;
  link_->close();
  ASSERT_TRUE(run_until([&] { return link_->state() == link_state::closed; }, 5s));
  link_.reset();
  open_link(fast_link(115200));
  const auto fast = link_->retransmit_timeout(64) - 1ms;  // fast_link's floor
  EXPECT_NEAR(static_cast<double>(slow.count()) / static_cast<double>(fast.count()), 12.0, 1e-6);
}

// Pacing: at 38400 baud an echo of 200 bytes cannot come back before its request and reply frames
// (208 + 209 bytes) have crossed the line, 417 x 260 us = 108 ms. A lower bound only.
TEST_F(uart_link_test, the_board_paces_bytes_at_the_baud_rate) {
  auto board_cfg = fast_board();
  board_cfg.baud = 38400;
  board_cfg.paced = true;
  board_cfg.time_scale = 1;
  start_board(board_cfg);
  open_link(fast_link(38400));
  ASSERT_TRUE(call_sync(board_command::echo, le32(0), 5s));  // first contact (SYNs) done
  const std::vector<std::byte> body(200, std::byte{0x5A});
  const auto t0 = clock_type::now();
  auto r = call_sync(board_command::echo, body, 5s);
  const auto elapsed = clock_type::now() - t0;
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r.value(), body);
  EXPECT_GE(elapsed, wire::serial_frame_time(38400, 10, 208 + 209));
}

}  // namespace
}  // namespace vessel::bridges::uart
