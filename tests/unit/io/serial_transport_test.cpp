// The serial transport over pty pairs: a board thread on the master paces bytes at the baud rate
// (a pty ignores baud), the transport opens the slave through a symlink as it would /dev/ttyUSB0.

#include "io/serial_transport.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "io/errc.hpp"
#include "tests/unit/io/pty_board.hpp"
#include "wire/errc.hpp"
#include "wire/serial_frame.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;
using test::pty_board;

std::vector<std::byte> bytes_of(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((seed * 31 + i * 7) & 0xFF);
  return v;
}

std::vector<std::byte> frame_of(std::span<const std::byte> payload) {
  std::vector<std::byte> out(wire::serial_frame_size(payload.size()));
  const auto n = wire::encode_serial_frame(payload, out);
  EXPECT_TRUE(n.has_value());
  return out;
}

// Records callbacks; everything runs on the test thread (the reactor is driven from it).
struct recorder final : serial_handler {
  void on_serial_frame(std::span<const std::byte> payload) override {
    frames.emplace_back(payload.begin(), payload.end());
  }
  void on_writable() override { ++writable; }
  void on_closed(std::error_code why) override {
    closed = why;
    closed_at = std::chrono::steady_clock::now();
  }
  std::vector<std::vector<std::byte>> frames;
  int writable = 0;
  std::optional<std::error_code> closed;
  std::chrono::steady_clock::time_point closed_at;
};

class serial_transport_test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vessel_serial_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    link_ = dir_ / "ttyBOARD";
    reactor_config rc;
    rc.own_thread = false;  // driven from the test thread: callbacks need no locks
    reactor_ = std::make_unique<reactor>(rc);
    ASSERT_TRUE(reactor_->start().has_value());
  }

  void TearDown() override {
    if (transport_ && !handler_.closed) {
      transport_->close();
      run_until([&] { return handler_.closed.has_value(); }, 2s);
    }
    reactor_->stop();
    while (reactor_->run_once(10ms)) {
    }
    transport_.reset();
    reactor_.reset();
    board_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  template <class Pred>
  bool run_until(Pred pred, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      reactor_->run_once(1ms);
    }
    return true;
  }

  serial_config config(std::uint32_t baud) const {
    serial_config c;
    c.path = link_.string();
    c.baud = baud;
    return c;
  }

  void open(std::uint32_t baud, serial_transport_config tc = {}) {
    auto t = serial_transport::open(*reactor_, config(baud), handler_, tc);
    ASSERT_TRUE(t.has_value()) << t.error().message();
    transport_ = std::move(t).value();
  }

  // Frames both ways at once: the host sends `count` frames of `size` bytes, the board as many.
  // Checks the bytes, and that each direction took at least the line time and not wildly more.
  void exchange_at(std::uint32_t baud, int count, std::size_t size) {
    board_ = std::make_unique<pty_board>(link_);
    open(baud);
    board_->start(baud);

    std::vector<std::byte> expect_at_board;
    std::vector<std::vector<std::byte>> sent_by_board;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) {
      const auto host_payload = bytes_of(size, static_cast<unsigned>(i));
      ASSERT_TRUE(transport_->send_frame(host_payload).has_value());
      const auto f = frame_of(host_payload);
      expect_at_board.insert(expect_at_board.end(), f.begin(), f.end());
      sent_by_board.push_back(bytes_of(size, 100u + static_cast<unsigned>(i)));
      board_->send(frame_of(sent_by_board.back()));
    }
    const auto line_time = wire::serial_frame_time(
        baud, wire::bits_per_char_8n1, static_cast<std::size_t>(count) * (size + 3));
    // Generous: ASan, 2 shared cores and 2 ms poll slices of the board thread.
    const auto bound = line_time * 3 + 300ms;
    ASSERT_TRUE(run_until([&] { return handler_.frames.size() == sent_by_board.size(); },
                          std::chrono::duration_cast<std::chrono::milliseconds>(bound) + 1s))
        << describe();
    const auto host_rx_time = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(handler_.frames, sent_by_board);
    EXPECT_GE(host_rx_time, line_time * 99 / 100);  // the board paced its bytes
    EXPECT_LE(host_rx_time, bound);

    const auto at_board = board_->wait_received(expect_at_board.size(), 5s);
    EXPECT_EQ(at_board, expect_at_board);
    const auto board_rx_time = board_->last_rx_done() - start;
    EXPECT_GE(board_rx_time, line_time * 99 / 100);
    EXPECT_LE(board_rx_time, bound);

    const auto s = transport_->stats();
    EXPECT_EQ(s.frames_received, static_cast<std::uint64_t>(count));
    EXPECT_EQ(s.frames_queued, static_cast<std::uint64_t>(count));
    EXPECT_EQ(s.bytes_sent, expect_at_board.size());
    EXPECT_EQ(s.crc_errors + s.resync_bytes + s.truncated, 0u);
  }

  std::string describe() const {
    const auto s = transport_->stats();
    return "frames=" + std::to_string(handler_.frames.size()) +
           " rx_bytes=" + std::to_string(s.bytes_received) + " tx_bytes=" +
           std::to_string(s.bytes_sent) + " crc=" + std::to_string(s.crc_errors) +
           " truncated=" + std::to_string(s.truncated) + " resync=" + std::to_string(s.resync_bytes) +
           " open=" + std::to_string(transport_->is_open()) +
           " closed=" + (handler_.closed ? handler_.closed->message() : std::string{"no"});
  }

  std::filesystem::path dir_;
  std::filesystem::path link_;
  std::unique_ptr<reactor> reactor_;
  std::unique_ptr<pty_board> board_;
  recorder handler_;
  std::unique_ptr<serial_transport> transport_;
};

TEST(serial_config_test, rejects_baud_rates_without_a_termios_constant) {
  for (std::uint32_t baud : {9600u, 19200u, 57600u, 115200u, 230400u, 921600u, 1000000u, 4000000u}) {
    EXPECT_TRUE(baud_to_speed(baud).has_value()) << baud;
    EXPECT_EQ(speed_to_baud(baud_to_speed(baud).value()), baud);
  }
  EXPECT_EQ(baud_to_speed(12345).error(), errc::unsupported_baud);
  EXPECT_EQ(baud_to_speed(0).error(), errc::unsupported_baud);
  serial_config c{.path = "/dev/null", .baud = 250000};
  EXPECT_EQ(c.validate().error(), errc::unsupported_baud);
}

TEST(serial_config_test, rejects_character_formats_termios_cannot_express) {
  serial_config c{.path = "/dev/ttyUSB0"};
  EXPECT_TRUE(c.validate().has_value());
  c.data_bits = 9;
  EXPECT_EQ(c.validate().error(), errc::unsupported_serial_format);
  c.data_bits = 7;
  c.stop_bits = 3;
  EXPECT_EQ(c.validate().error(), errc::unsupported_serial_format);
  c.stop_bits = 2;
  c.parity = wire::serial_parity::even;
  EXPECT_TRUE(c.validate().has_value());
  EXPECT_EQ(c.bits_per_char(), 11u);
  EXPECT_EQ(c.to_string(), "path=/dev/ttyUSB0 baud=115200 format=7E2 rts_cts=0");
  c.path.clear();
  EXPECT_EQ(c.validate().error(), std::errc::invalid_argument);
}

TEST_F(serial_transport_test, open_of_a_missing_path_fails_with_enoent) {
  auto t = serial_transport::open(*reactor_, config(115200), handler_);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error(), std::errc::no_such_file_or_directory);
}

TEST_F(serial_transport_test, open_of_a_regular_file_fails_as_not_a_tty) {
  const auto file = dir_ / "plain";
  const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  serial_config c = config(115200);
  c.path = file.string();
  auto port = serial_port::open(c);
  ASSERT_FALSE(port.has_value());
  EXPECT_EQ(port.error(), std::errc::inappropriate_io_control_operation);
}

TEST_F(serial_transport_test, raw_mode_and_baud_are_visible_from_the_master) {
  board_ = std::make_unique<pty_board>(link_);
  open(9600);
  termios t{};
  ASSERT_EQ(::tcgetattr(board_->master(), &t), 0);
  EXPECT_EQ(::cfgetospeed(&t), B9600);
  EXPECT_EQ(::cfgetispeed(&t), B9600);
  EXPECT_EQ(t.c_lflag & (ICANON | ECHO | ISIG | IEXTEN), 0u);      // no line discipline
  EXPECT_EQ(t.c_iflag & (ICRNL | INLCR | IXON | ISTRIP), 0u);      // 8-bit clean input
  EXPECT_EQ(t.c_oflag & OPOST, 0u);                                // no output translation
  EXPECT_EQ(t.c_cflag & CSIZE, static_cast<tcflag_t>(CS8));
  EXPECT_EQ(t.c_cflag & (PARENB | CSTOPB | CRTSCTS), 0u);
  EXPECT_NE(t.c_cflag & CLOCAL, 0u);
  EXPECT_EQ(t.c_cc[VMIN], 1);
  EXPECT_EQ(t.c_cc[VTIME], 0);
}

TEST_F(serial_transport_test, stop_bits_and_rts_cts_are_visible_from_the_master) {
  board_ = std::make_unique<pty_board>(link_);
  serial_config c = config(115200);
  c.stop_bits = 2;
  c.rts_cts = true;
  auto t = serial_transport::open(*reactor_, c, handler_);
  ASSERT_TRUE(t.has_value()) << t.error().message();
  transport_ = std::move(t).value();
  termios tio{};
  ASSERT_EQ(::tcgetattr(board_->master(), &tio), 0);
  EXPECT_EQ(::cfgetospeed(&tio), B115200);
  EXPECT_EQ(tio.c_cflag & CSIZE, static_cast<tcflag_t>(CS8));
  EXPECT_NE(tio.c_cflag & CSTOPB, 0u);
  EXPECT_NE(tio.c_cflag & CRTSCTS, 0u);
  // The decoder's silence bound follows the format: 8N2 is 11 bits per character.
  EXPECT_EQ(transport_->read_timeout(), wire::serial_read_timeout(115200, 11, 256));
}

TEST_F(serial_transport_test, a_format_the_driver_does_not_take_is_refused_not_ignored) {
  // The pty driver forces CS8 and clears PARENB whatever is asked (pty_set_termios), as a UART
  // without 7-bit or parity support would: tcsetattr succeeds, only the read-back tells.
  board_ = std::make_unique<pty_board>(link_);
  serial_config c = config(115200);
  c.data_bits = 7;
  c.parity = wire::serial_parity::even;
  auto t = serial_transport::open(*reactor_, c, handler_);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error(), errc::unsupported_serial_format);
  EXPECT_EQ(reactor_->ops_in_flight(), 0u);
}

TEST_F(serial_transport_test, frames_cross_both_ways_at_a_paced_115200_baud) {
  exchange_at(115200, 20, 64);  // 1340 bytes each way: 116 ms of line time
}

TEST_F(serial_transport_test, frames_cross_both_ways_at_a_paced_9600_baud) {
  exchange_at(9600, 3, 29);  // 96 bytes each way: 100 ms of line time
}

TEST_F(serial_transport_test, garbage_and_corrupted_frames_are_counted_not_delivered) {
  board_ = std::make_unique<pty_board>(link_);
  open(115200);
  board_->start(115200);
  const auto good1 = bytes_of(40, 1);
  const auto good2 = bytes_of(12, 2);
  auto corrupt = frame_of(bytes_of(30, 3));
  corrupt.back() ^= std::byte{0x5A};  // bad CRC
  std::vector<std::byte> line;
  for (int v : {0x00, 0x13, 0x55, 0xFF, 0x42}) line.push_back(static_cast<std::byte>(v));  // garbage
  const auto f1 = frame_of(good1);
  line.insert(line.end(), f1.begin(), f1.end());
  line.insert(line.end(), corrupt.begin(), corrupt.end());
  const auto f2 = frame_of(good2);
  line.insert(line.end(), f2.begin(), f2.end());
  board_->send(line);

  ASSERT_TRUE(run_until([&] { return handler_.frames.size() >= 2; }, 3s));
  ASSERT_TRUE(run_until([&] { return transport_->stats().bytes_received == line.size(); }, 3s));
  run_until([] { return false; }, 20ms);  // nothing more may come
  ASSERT_EQ(handler_.frames.size(), 2u);
  EXPECT_EQ(handler_.frames[0], good1);
  EXPECT_EQ(handler_.frames[1], good2);
  const auto s = transport_->stats();
  EXPECT_EQ(s.resync_bytes + s.crc_errors + s.bad_length + s.truncated,
            5u + corrupt.size());  // every bad byte accounted for, none delivered
  EXPECT_GE(s.crc_errors, 1u);
  EXPECT_GE(s.resync_bytes, 5u);
}

TEST_F(serial_transport_test, a_partial_frame_is_dropped_after_the_baud_derived_read_timeout) {
  board_ = std::make_unique<pty_board>(link_);
  open(115200);
  board_->start(115200);
  // A frame announcing 50 bytes that stops after 10: only the silence can end it.
  auto cut = frame_of(bytes_of(50, 7));
  cut.resize(12);
  board_->send(cut);
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_TRUE(run_until([&] { return transport_->stats().truncated == 1; }, 3s));
  const auto took = std::chrono::steady_clock::now() - sent;
  EXPECT_GE(took, transport_->read_timeout());  // 115200 8N1: 64.4 ms
  EXPECT_LE(took, transport_->read_timeout() + 500ms);
  EXPECT_TRUE(handler_.frames.empty());
  // The line still works afterwards.
  const auto good = bytes_of(20, 8);
  board_->send(frame_of(good));
  ASSERT_TRUE(run_until([&] { return handler_.frames.size() == 1; }, 3s));
  EXPECT_EQ(handler_.frames[0], good);
}

TEST_F(serial_transport_test, closing_the_master_reports_device_unplugged) {
  board_ = std::make_unique<pty_board>(link_);
  open(115200);
  board_->start(115200);
  run_until([] { return false; }, 10ms);  // the read is parked
  const auto pulled = std::chrono::steady_clock::now();
  board_->unplug();
  ASSERT_TRUE(run_until([&] { return handler_.closed.has_value(); }, 2s));
  EXPECT_EQ(*handler_.closed, errc::device_unplugged);
  EXPECT_LE(handler_.closed_at - pulled, 500ms);
  EXPECT_FALSE(transport_->is_open());
  EXPECT_EQ(transport_->stats().unplugs, 1u);
  EXPECT_EQ(reactor_->ops_in_flight(), 0u);
  EXPECT_EQ(transport_->send_frame(bytes_of(4, 0)).error(), errc::transport_closed);
}

TEST_F(serial_transport_test, reopen_after_a_new_device_appears_at_the_symlinked_path) {
  board_ = std::make_unique<pty_board>(link_);
  open(115200);
  board_->start(115200);
  board_->unplug();
  ASSERT_TRUE(run_until([&] { return handler_.closed.has_value(); }, 2s));
  ASSERT_EQ(*handler_.closed, errc::device_unplugged);
  // While the device is away the path is dangling: reopen fails cleanly.
  std::filesystem::remove(link_);
  EXPECT_EQ(transport_->reopen().error(), std::errc::no_such_file_or_directory);

  board_ = std::make_unique<pty_board>(link_);  // "plugged in again": a new pty at the same link
  board_->start(115200);
  handler_.closed.reset();
  ASSERT_TRUE(transport_->reopen().has_value());
  EXPECT_TRUE(transport_->is_open());
  const auto up = bytes_of(33, 9);
  const auto down = bytes_of(17, 10);
  ASSERT_TRUE(transport_->send_frame(up).has_value());
  board_->send(frame_of(down));
  ASSERT_TRUE(run_until([&] { return handler_.frames.size() == 1; }, 3s));
  EXPECT_EQ(handler_.frames[0], down);
  EXPECT_EQ(board_->wait_received(frame_of(up).size(), 3s), frame_of(up));
  const auto s = transport_->stats();
  EXPECT_EQ(s.opens, 2u);
  EXPECT_EQ(s.unplugs, 1u);
}

TEST_F(serial_transport_test, close_cancels_the_parked_read_and_reports_transport_closed) {
  board_ = std::make_unique<pty_board>(link_);
  open(115200);
  run_until([] { return false; }, 10ms);
  EXPECT_GE(reactor_->ops_in_flight(), 2u);  // the parked read and the hang-up poll
  const auto t0 = std::chrono::steady_clock::now();
  transport_->close();
  transport_->close();  // idempotent
  ASSERT_TRUE(run_until([&] { return handler_.closed.has_value(); }, 2s));
  EXPECT_EQ(*handler_.closed, errc::transport_closed);
  EXPECT_LE(std::chrono::steady_clock::now() - t0, 500ms);
  EXPECT_EQ(reactor_->ops_in_flight(), 0u);
  EXPECT_EQ(transport_->stats().unplugs, 0u);
}

TEST_F(serial_transport_test, a_stopping_reactor_ends_the_link_with_transport_closed) {
  board_ = std::make_unique<pty_board>(link_);
  open(115200);
  run_until([] { return false; }, 10ms);
  reactor_->stop();
  while (reactor_->run_once(10ms)) {
  }
  ASSERT_TRUE(handler_.closed.has_value());
  EXPECT_EQ(*handler_.closed, errc::transport_closed);
  EXPECT_FALSE(transport_->is_open());
}

TEST_F(serial_transport_test, a_full_send_queue_pushes_back_then_reports_writable) {
  board_ = std::make_unique<pty_board>(link_);
  open(115200, serial_transport_config{.send_queue_bytes = 1024});
  // Without a reactor turn nothing is written: 4 frames of 256 bytes fill the 1024.
  const auto payload = bytes_of(253, 3);
  int accepted = 0;
  for (; accepted < 10; ++accepted) {
    auto r = transport_->send_frame(payload);
    if (!r) {
      EXPECT_EQ(r.error(), errc::send_queue_full);
      break;
    }
  }
  EXPECT_EQ(accepted, 4);
  EXPECT_EQ(transport_->stats().send_queue_full, 1u);
  board_->start(115200);
  ASSERT_TRUE(run_until([&] { return handler_.writable == 1; }, 3s));
  ASSERT_TRUE(run_until([&] { return transport_->queued_bytes() == 0; }, 3s));
  const auto at_board = board_->wait_received(static_cast<std::size_t>(accepted) * 256, 3s);
  EXPECT_EQ(at_board.size(), static_cast<std::size_t>(accepted) * 256);
  EXPECT_TRUE(transport_->send_frame(payload).has_value());
}

TEST_F(serial_transport_test, a_payload_over_253_bytes_is_refused) {
  board_ = std::make_unique<pty_board>(link_);
  open(115200);
  EXPECT_EQ(transport_->send_frame(bytes_of(254, 0)).error(), wire::errc::serial_payload_too_large);
  EXPECT_TRUE(transport_->send_frame(bytes_of(253, 0)).has_value());
}

}  // namespace
}  // namespace vessel::io
