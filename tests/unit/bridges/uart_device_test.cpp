// The UART device actor (bridges/uart/uart_device.hpp) under a vessel::node, against the virtual
// board on a pty: commands and typed errors through the device_actor interface, telemetry to
// listeners, 1,000 calls through a line corrupting 1% of bytes (every call answered exactly once,
// the byte counters equal what the board saw), unplug and replug mid-stream (the actor fails, its
// supervisor restarts it, calls in flight fail with a typed error and are retried by the caller),
// and call timeouts against the line time at 9600 and 115200 baud.
//
// A driver actor keeps calls outstanding; the test thread only waits for its progress counters.

#include "bridges/uart/uart_device.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/actor_errc.hpp"
#include "actors/node.hpp"
#include "bridges/uart/errc.hpp"
#include "bridges/uart/virtual_board/virtual_board.hpp"

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

template <class Pred>
bool wait_for(Pred pred, clock_type::duration timeout) {
  const auto deadline = clock_type::now() + timeout;
  while (!pred()) {
    if (clock_type::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// What a driver saw; shared with the test thread (guarded).
struct drive_log {
  std::mutex mutex;
  std::vector<std::uint8_t> answered;  // per call number: successful replies with its own body
  std::uint32_t wrong = 0;             // replies with another body
  std::vector<std::string> failures;   // described errors, in order
  std::atomic<std::uint32_t> completed{0};
  std::atomic<std::uint32_t> failed{0};
};

using call_one_atom = caf::atom_constant<caf::atom("callone")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;

struct driver_state {
  std::shared_ptr<drive_log> log;
  actors::device_actor device;
  caf::actor supervisor;
  std::string name;
  io::buffer_pool* pool = nullptr;
  std::uint32_t total = 0;
  std::uint32_t made = 0;
};

// Echo-calls numbers 0..total-1, `outstanding` at a time; a failed call is recorded and made
// again on the device's current incarnation (asked of its supervisor) after a short pause.
caf::behavior driver(caf::stateful_actor<driver_state>* self, std::shared_ptr<drive_log> log,
                     caf::actor supervisor, std::string name, io::buffer_pool* pool, std::uint32_t total,
                     std::uint32_t outstanding) {
  auto& init = self->state;
  init.log = std::move(log);
  init.supervisor = std::move(supervisor);
  init.name = std::move(name);
  init.pool = pool;
  init.total = total;
  for (std::uint32_t i = 0; i < outstanding && i < total; ++i) self->send(self, retry_atom::value, init.made++);
  return {
      [self](call_one_atom, std::uint32_t n) {
        auto& st = self->state;
        auto body = actors::payload::copy_of(*st.pool, le32(n));
        if (!body) {
          self->delayed_send(self, 5ms, call_one_atom::value, n);
          return;
        }
        self->request(st.device, caf::infinite, actors::call_atom::value, std::string{"0x01"},
                      std::move(body).value(), caf::timespan{10s})
            .then(
                [self, n](actors::payload& reply) {
                  auto& ds = self->state;
                  {
                    std::lock_guard lock{ds.log->mutex};
                    if (reply.size() == 4 && get32(reply.bytes()) == n) {
                      ++ds.log->answered[n];
                    } else {
                      ++ds.log->wrong;
                    }
                  }
                  ds.log->completed.fetch_add(1);
                  if (ds.made < ds.total) self->send(self, call_one_atom::value, ds.made++);
                },
                [self, n](caf::error& e) {
                  auto& ds = self->state;
                  {
                    std::lock_guard lock{ds.log->mutex};
                    ds.log->failures.push_back(actors::describe(e));
                  }
                  ds.log->failed.fetch_add(1);
                  self->delayed_send(self, 20ms, retry_atom::value, n);
                });
      },
      [self](retry_atom, std::uint32_t n) {
        auto& st = self->state;
        self->request(st.supervisor, 2s, actors::child_atom::value, st.name)
            .then(
                [self, n](caf::actor& a) {
                  if (!a) {  // waiting for its restart
                    self->delayed_send(self, 20ms, retry_atom::value, n);
                    return;
                  }
                  self->state.device = caf::actor_cast<actors::device_actor>(a);
                  self->send(self, call_one_atom::value, n);
                },
                [self, n](caf::error&) { self->delayed_send(self, 20ms, retry_atom::value, n); });
      },
  };
}

// Receives telemetry frames; counts them, and says how many on request (a sync point: frames
// queued before the request are counted).
using count_atom = caf::atom_constant<caf::atom("count")>;
using counting_listener = actors::device_listener::extend<caf::replies_to<count_atom>::with<std::uint64_t>>;
struct listener_state {
  std::uint32_t frames = 0;
  std::uint32_t bad = 0;
};
counting_listener::behavior_type frame_listener(counting_listener::stateful_pointer<listener_state> self,
                                                std::string expected_name) {
  return {
      [self, expected_name](actors::frame_atom, const std::string& name, const actors::payload& data) {
        // topic | u32 sample | i32 temperature
        if (name != expected_name || data.size() != 9 || data.bytes()[0] != std::byte{telemetry_topic}) {
          ++self->state.bad;
        }
        ++self->state.frames;
      },
      [self](count_atom) -> std::uint64_t {  // bad << 32 | frames
        return (std::uint64_t{self->state.bad} << 32) | self->state.frames;
      },
  };
}

class uart_device_test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vessel_uartdev_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    node_ = std::make_unique<vessel::node>();
  }

  void TearDown() override {
    node_->stop();
    node_.reset();
    board_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

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

  uart_device_config fast_device(std::uint32_t baud = 4'000'000) {
    uart_device_config c;
    c.name = "board";
    c.link.serial.path = (dir_ / "ttyBOARD").string();
    c.link.serial.baud = baud;
    c.link.channel.rto_floor = 1ms;
    c.link.channel.window = 8;
    c.link.session = 0x40;
    c.supervision.restart_backoff = io::reconnect_policy{5ms, 100ms, 2.0, 0, true};
    return c;
  }

  void start_board(virtual_board_config c) {
    board_ = std::make_unique<virtual_board>(std::move(c));
    board_->start();
  }

  // Adds the device under its own supervisor; returns the supervisor.
  caf::actor add_device(uart_device_config c) {
    auto sup = node_->spawn_supervised(supervised_uart_device(node_->reactor(), node_->pool(), std::move(c)));
    EXPECT_TRUE(sup.has_value());
    return sup ? sup.value() : caf::actor{};
  }

  // The current incarnation once it has opened the port (its stats answer only then... or fail).
  actors::device_actor device(const caf::actor& sup, const std::string& name = "board") {
    actors::device_actor dev;
    wait_for([&] { return static_cast<bool>(dev = current_uart_device(node_->system(), sup, name)); }, 10s);
    return dev;
  }

  actors::payload bytes(std::span<const std::byte> b) { return actors::payload::copy_of(node_->pool(), b).value(); }

  // One call through the actor: the reply bytes, or the error it came back with.
  result<std::vector<std::byte>> call(const actors::device_actor& dev, const std::string& cmd,
                                      std::span<const std::byte> body, caf::timespan timeout = caf::timespan{2s}) {
    caf::scoped_actor self{node_->system()};
    std::optional<result<std::vector<std::byte>>> out;
    self->request(dev, 30s, actors::call_atom::value, cmd, bytes(body), timeout)
        .receive([&](actors::payload& p) { out.emplace(std::vector<std::byte>(p.bytes().begin(), p.bytes().end())); },
                 [&](caf::error& e) {
                   last_error_ = actors::describe(e);
                   out.emplace(actors::from_caf_error(e));
                 });
    return std::move(*out);
  }

  actors::device_stats stats(const actors::device_actor& dev) {
    caf::scoped_actor self{node_->system()};
    actors::device_stats s;
    self->request(dev, 10s, actors::stats_atom::value)
        .receive([&](actors::device_stats& r) { s = r; }, [&](caf::error& e) { ADD_FAILURE() << actors::describe(e); });
    return s;
  }

  std::filesystem::path dir_;
  std::unique_ptr<vessel::node> node_;
  std::unique_ptr<virtual_board> board_;
  std::string last_error_;
};

TEST_F(uart_device_test, commands_answer_through_the_actor_and_errors_are_typed) {
  start_board(fast_board());
  auto sup = add_device(fast_device());
  auto dev = device(sup);
  ASSERT_TRUE(dev);
  const std::vector<std::byte> hello{std::byte{'h'}, std::byte{'i'}};
  auto r = call(dev, "0x01", hello);
  ASSERT_TRUE(r) << last_error_;
  EXPECT_EQ(r.value(), hello);
  auto args = le32(40);
  const auto b = le32(2);
  args.insert(args.end(), b.begin(), b.end());
  r = call(dev, "2", args);  // add, decimal command
  ASSERT_TRUE(r) << last_error_;
  EXPECT_EQ(get32(r.value()), 42u);

  EXPECT_EQ(call(dev, "0x7E", {}).error(), errc::unknown_command);
  EXPECT_EQ(call(dev, "0x02", hello).error(), errc::bad_request);
  EXPECT_EQ(call(dev, "0x81", {}).error(), errc::bad_command);
  EXPECT_EQ(call(dev, "echo", {}).error(), errc::bad_command);
  const std::vector<std::byte> big(max_request_body + 1);
  EXPECT_EQ(call(dev, "0x01", big).error(), errc::message_too_large);

  // A hung board: the call times out with the typed device error; the actor stays up.
  board_->hang(300ms);
  EXPECT_EQ(call(dev, "0x01", hello, caf::timespan{30ms}).error(), actors::actor_errc::device_timeout);
  EXPECT_NE(last_error_.find("board"), std::string::npos) << last_error_;

  // Fire-and-forget.
  const auto before = board_->stats().requests;
  {
    caf::scoped_actor self{node_->system()};
    bool sent = false;
    self->request(dev, 10s, actors::send_atom::value, std::string{"0x01"}, bytes(hello))
        .receive([&](actors::sent_atom) { sent = true; }, [&](caf::error& e) { ADD_FAILURE() << actors::describe(e); });
    EXPECT_TRUE(sent);
  }
  ASSERT_TRUE(wait_for([&] { return board_->stats().requests >= before + 2; }, 10s));  // the late call, the send

  const auto s = stats(dev);
  EXPECT_EQ(s.calls, 2u);        // echo, add
  EXPECT_EQ(s.call_errors, 3u);  // unknown command, bad request, too large (the bad ids never left the actor)
  EXPECT_EQ(s.call_timeouts, 1u);
  EXPECT_EQ(s.sends, 1u);
  EXPECT_GT(s.frames_in, 0u);
  EXPECT_GT(s.frames_out, 0u);
  EXPECT_GT(s.bytes_in, 0u);
  EXPECT_EQ(s.crc_errors, 0u);
  EXPECT_EQ(s.reconnects, 0u);
}

TEST_F(uart_device_test, telemetry_reaches_listeners_until_they_unlisten) {
  start_board(fast_board());
  auto sup = add_device(fast_device());
  auto dev = device(sup);
  ASSERT_TRUE(dev);
  auto l = node_->system().spawn(frame_listener, std::string{"board"});
  auto count = [&] {
    caf::scoped_actor self{node_->system()};
    std::pair<std::uint32_t, std::uint32_t> out{0, 0};
    self->request(l, 10s, count_atom::value)
        .receive([&](std::uint64_t v) { out = {static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32)}; },
                 [&](caf::error& e) { ADD_FAILURE() << actors::describe(e); });
    return out;
  };
  caf::anon_send(dev, actors::listen_atom::value, caf::actor_cast<actors::device_listener>(l));
  const std::uint16_t hz = 200;
  ASSERT_TRUE(call(dev, "0x04", std::vector<std::byte>{std::byte(hz & 0xFF), std::byte(hz >> 8)})) << last_error_;
  ASSERT_TRUE(wait_for([&] { return count().first >= 10; }, 10s));
  EXPECT_EQ(count().second, 0u);
  caf::anon_send(dev, actors::unlisten_atom::value, caf::actor_cast<actors::device_listener>(l));
  // The stats reply comes after the device handled unlisten; the count after it includes every
  // frame the device sent to the listener before.
  const auto unsolicited = stats(dev).unsolicited;
  const auto seen = count().first;
  ASSERT_TRUE(wait_for([&] { return stats(dev).unsolicited >= unsolicited + 5; }, 10s));
  EXPECT_EQ(count().first, seen);
  caf::anon_send_exit(l, caf::exit_reason::user_shutdown);
}

// The proof through the actor (the 10,000-call version runs on uart_link itself,
// uart_link_test): every call answered exactly once, the board ran each request once, and what
// both sides counted on the line agrees.
TEST_F(uart_device_test, a_thousand_calls_through_one_percent_corruption_each_answered_once) {
  constexpr std::uint32_t total = 1000;
  // The board boots once the port is open: the open flushes what the tty holds.
  board_ = std::make_unique<virtual_board>(fast_board(0.01, 20261129));
  auto sup = add_device(fast_device());
  auto dev = device(sup);
  ASSERT_TRUE(dev);
  stats(dev);  // answered on the reactor after the open: the port is open
  board_->start();

  auto log = std::make_shared<drive_log>();
  log->answered.assign(total, 0);
  auto d = node_->system().spawn(driver, log, sup, std::string{"board"}, &node_->pool(), total, 16u);
  ASSERT_TRUE(wait_for([&] { return log->completed.load() == total || log->failed.load() > 0; }, 240s))
      << log->completed.load() << " of " << total;
  {
    std::lock_guard lock{log->mutex};
    EXPECT_EQ(log->failures.size(), 0u) << (log->failures.empty() ? "" : log->failures.front());
    EXPECT_EQ(log->wrong, 0u);
    for (std::uint32_t i = 0; i < total; ++i) ASSERT_EQ(log->answered[i], 1) << "call " << i;
  }
  caf::anon_send_exit(d, caf::exit_reason::user_shutdown);

  // Quiesce: the board has read all the host wrote, then stops; the host has read all it wrote.
  ASSERT_TRUE(wait_for([&] { return board_->stats().from_host.bytes == stats(dev).bytes_out; }, 30s));
  board_->stop();
  ASSERT_TRUE(wait_for([&] { return board_->stats().to_host.bytes == stats(dev).bytes_in; }, 30s))
      << board_->stats().to_host.bytes << " vs " << stats(dev).bytes_in;

  const auto s = stats(dev);
  const auto board = board_->stats();
  EXPECT_EQ(s.calls, total);
  EXPECT_EQ(s.call_timeouts, 0u);
  EXPECT_EQ(s.call_errors, 0u);
  EXPECT_EQ(board.requests, total);  // exactly once on the board too
  EXPECT_EQ(board.link.delivered_reliable, total);
  // About 1% of the bytes were flipped each way; the host saw damaged frames and resent.
  EXPECT_NEAR(static_cast<double>(board.to_host.bits_flipped) / static_cast<double>(board.to_host.bytes), 0.01, 0.004);
  EXPECT_GT(board.to_host.frames_damaged, 0u);
  EXPECT_GT(s.crc_errors, 0u);
  EXPECT_GT(s.retransmits, 0u);
  EXPECT_GT(board.link.retransmitted_frames, 0u);
  // No frame the host accepted is one the board did not send.
  EXPECT_LE(s.frames_in, board.to_host.frames);
  std::printf("[ stats    ] device: frames_in %llu out %llu crc_errors %llu resync %llu retransmits %llu | board: "
              "frames %llu damaged %llu flips %llu\n",
              static_cast<unsigned long long>(s.frames_in), static_cast<unsigned long long>(s.frames_out),
              static_cast<unsigned long long>(s.crc_errors), static_cast<unsigned long long>(s.resync_bytes),
              static_cast<unsigned long long>(s.retransmits), static_cast<unsigned long long>(board.to_host.frames),
              static_cast<unsigned long long>(board.to_host.frames_damaged),
              static_cast<unsigned long long>(board.to_host.bits_flipped));
}

// Unplugged mid-stream: the actor fails with device_unplugged, its supervisor restarts it with
// backoff until the port is back, and the caller sees each call in flight fail with a typed error
// (never silence), retries it on the new incarnation, and ends with every call answered once.
TEST_F(uart_device_test, unplug_and_replug_mid_stream_restarts_the_actor_and_no_call_is_lost) {
  constexpr std::uint32_t total = 300;
  start_board(fast_board());
  auto sup = add_device(fast_device());
  auto first = device(sup);
  ASSERT_TRUE(first);

  auto log = std::make_shared<drive_log>();
  log->answered.assign(total, 0);
  auto d = node_->system().spawn(driver, log, sup, std::string{"board"}, &node_->pool(), total, 8u);
  ASSERT_TRUE(wait_for([&] { return log->completed.load() >= 100; }, 60s));
  // The board stops answering (calls pile up in flight), then is pulled out for 200 ms.
  board_->hang(1s);
  board_->unplug(200ms);
  ASSERT_TRUE(wait_for([&] { return log->completed.load() == total; }, 120s)) << log->completed.load();
  caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
  {
    std::lock_guard lock{log->mutex};
    EXPECT_EQ(log->wrong, 0u);
    for (std::uint32_t i = 0; i < total; ++i) ASSERT_EQ(log->answered[i], 1) << "call " << i;
    // The calls in flight at the unplug failed, each with a typed reason.
    EXPECT_GE(log->failures.size(), 1u);
    for (const auto& f : log->failures) {
      // describe() renders vessel errors as "vessel.uart/<message>: <detail>".
      const bool typed = f.find("vessel.uart/the device was unplugged") != std::string::npos ||
                         f.find("request_receiver_down") != std::string::npos ||
                         f.find("cannot open") != std::string::npos || f.find("vessel.uart/") == 0;
      EXPECT_TRUE(typed) << f;
    }
  }
  auto now = device(sup);
  ASSERT_TRUE(now);
  EXPECT_NE(now, first);  // restarted
  const auto s = stats(now);
  EXPECT_GE(s.reconnects, 1u);
  EXPECT_GE(s.calls, total);
  EXPECT_EQ(board_->stats().unplugs, 1u);
}

// Within the grace period the same incarnation rides out an unplug: the link reopens the port and
// resends the calls in flight, so the caller sees no failure at all.
TEST_F(uart_device_test, an_unplug_shorter_than_the_grace_is_ridden_out_by_the_same_actor) {
  constexpr std::uint32_t total = 200;
  start_board(fast_board());
  auto cfg = fast_device();
  cfg.unplug_grace = 30s;
  cfg.link.reopen = io::reconnect_policy{2ms, 20ms, 2.0, 0, false};
  auto sup = add_device(cfg);
  auto first = device(sup);
  ASSERT_TRUE(first);
  auto log = std::make_shared<drive_log>();
  log->answered.assign(total, 0);
  auto d = node_->system().spawn(driver, log, sup, std::string{"board"}, &node_->pool(), total, 8u);
  ASSERT_TRUE(wait_for([&] { return log->completed.load() >= 50; }, 60s));
  board_->unplug(100ms);
  ASSERT_TRUE(wait_for([&] { return log->completed.load() == total || log->failed.load() > 0; }, 120s));
  caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
  {
    std::lock_guard lock{log->mutex};
    EXPECT_TRUE(log->failures.empty()) << log->failures.front();
    for (std::uint32_t i = 0; i < total; ++i) ASSERT_EQ(log->answered[i], 1) << "call " << i;
  }
  EXPECT_EQ(device(sup), first);  // no restart
  EXPECT_EQ(stats(first).reconnects, 1u);
}

TEST_F(uart_device_test, a_port_that_is_absent_at_start_is_opened_once_it_appears) {
  auto sup = add_device(fast_device());
  // No board yet: each incarnation fails to open and is restarted with backoff.
  const auto hello = le32(7);
  start_board(fast_board());
  actors::device_actor dev;
  result<std::vector<std::byte>> r = std::make_error_code(std::errc::no_such_file_or_directory);
  ASSERT_TRUE(wait_for([&] {
    dev = current_uart_device(node_->system(), sup, "board");
    if (!dev) return false;
    r = call(dev, "0x01", hello);
    return r.has_value();
  }, 30s)) << last_error_;
  EXPECT_EQ(r.value(), hello);
}

// Timeout math at the line's speed: a paced board at 9600 baud needs about 0.45 s to take a
// 200-byte request and send it back, so a 100 ms call cannot be answered, and one with room is;
// at 115200 the same call is twelve times shorter on the line.
TEST_F(uart_device_test, call_timeouts_scale_with_the_line_at_9600_and_115200) {
  std::vector<std::unique_ptr<virtual_board>> boards;
  for (const std::uint32_t baud : {9600u, 115200u}) {
    SCOPED_TRACE(baud);
    const auto name = "board" + std::to_string(baud);
    auto bc = fast_board();
    bc.link = dir_ / ("tty" + std::to_string(baud));
    bc.baud = baud;
    bc.paced = true;
    bc.time_scale = 1;
    boards.push_back(std::make_unique<virtual_board>(bc));
    boards.back()->start();
    auto cfg = fast_device(baud);
    cfg.name = name;
    cfg.link.serial.path = bc.link.string();
    cfg.link.channel.rto_floor = wire::serial_timeout_floor;
    auto sup = add_device(cfg);
    auto dev = device(sup, name);
    ASSERT_TRUE(dev);
    const std::vector<std::byte> body(200, std::byte{0x5A});
    const std::chrono::duration<double> line_time{2.0 * (200 + 16) * 10 / baud};
    if (baud == 9600) {
      ASSERT_GT(line_time, 400ms);
      EXPECT_EQ(call(dev, "0x01", body, caf::timespan{100ms}).error(), actors::actor_errc::device_timeout);
    } else {
      ASSERT_LT(line_time, 40ms);
    }
    auto r = call(dev, "0x01", body, caf::timespan{20s});
    ASSERT_TRUE(r) << last_error_;
    EXPECT_EQ(r.value(), body);
  }
  node_->stop();  // before the boards go
}

}  // namespace
}  // namespace vessel::bridges::uart
