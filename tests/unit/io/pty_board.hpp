#pragma once
// A virtual UART board for tests: owns the master side of a pty whose slave is reached through a
// symlink (the stable "device path" of HARNESS.md §3), and runs a thread that plays the board:
// it paces what it sends and what it consumes at bits_per_char / baud per byte, because a pty
// itself ignores the baud rate. Closing the master is the board being unplugged.

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "wire/serial_timing.hpp"

namespace vessel::io::test {

class pty_board {
 public:
  using clock = std::chrono::steady_clock;

  /// Opens a pty and points `link` at its slave (replacing an older link). Not started yet.
  explicit pty_board(std::filesystem::path link) : link_(std::move(link)) {
    char name[256] = {};
    if (::openpty(&master_, &keeper_, name, nullptr, nullptr) != 0) {
      throw std::runtime_error("openpty failed");
    }
    // The board keeps a slave fd of its own, as a real device node exists while nobody opens it:
    // without it the master would read EIO between the host's close and reopen.
    slave_name_ = name;
    std::error_code ec;
    std::filesystem::remove(link_, ec);
    std::filesystem::create_symlink(slave_name_, link_);
  }

  ~pty_board() {
    stop();
    if (master_ >= 0) ::close(master_);
    if (keeper_ >= 0) ::close(keeper_);
  }

  pty_board(const pty_board&) = delete;
  pty_board& operator=(const pty_board&) = delete;

  /// The master fd (termios ioctls on it read the slave's settings, HARNESS.md §3.1).
  int master() const noexcept { return master_; }
  const std::string& slave_name() const noexcept { return slave_name_; }

  /// Starts the board thread at `baud`, `bits_per_char` bits per byte.
  void start(std::uint32_t baud, unsigned bits_per_char = wire::bits_per_char_8n1) {
    byte_time_ = wire::serial_byte_time(baud, bits_per_char);
    thread_ = std::thread([this] { run(); });
  }

  /// Queues bytes to send as one unit (a frame), paced: they reach the host together when the
  /// line would have delivered the unit's last byte. Whole units, because a board thread starved
  /// by a loaded CI machine must not split a frame with a silence longer than the host's read
  /// timeout, which would be a real truncation, not the test's intent.
  void send(std::span<const std::byte> bytes) {
    std::lock_guard lock{mutex_};
    tx_.emplace_back(bytes.begin(), bytes.end());
  }

  /// Waits until the board has consumed at least `n` bytes (paced); returns them all.
  std::vector<std::byte> wait_received(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock{mutex_};
    cv_.wait_for(lock, timeout, [&] { return rx_.size() >= n; });
    return rx_;
  }

  /// When the board finished consuming the last byte it received (paced time).
  clock::time_point last_rx_done() {
    std::lock_guard lock{mutex_};
    return last_rx_done_;
  }

  /// When the board's last queued byte has left, once the queue is empty.
  clock::time_point tx_done() {
    std::lock_guard lock{mutex_};
    return tx_done_;
  }

  /// Unplugs the board: the master closes (the host's slave hangs up) and so does the keeper fd.
  void unplug() {
    stop();
    ::close(master_);
    master_ = -1;
    ::close(keeper_);
    keeper_ = -1;
  }

  /// Stops the board thread. Idempotent.
  void stop() {
    stopping_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  // Received bytes are consumed in 16-byte slices with a running deadline (HARNESS.md §3.2):
  // drift-free, and not one syscall per byte at high baud rates.
  static constexpr std::size_t slice = 16;

  void run() {
    auto tx_free = clock::now();  // when the line has sent everything handed to it so far
    auto rx_free = clock::now();  // when the board can consume the next received byte
    std::vector<std::byte> out;   // a unit on the line: its bytes arrive when its last bit has
    auto out_due = clock::now();  // been sent, as a UART delivers a byte after its stop bit
    std::array<std::byte, slice> chunk{};
    while (!stopping_.load()) {
      auto now = clock::now();
      if (out.empty()) {
        std::lock_guard lock{mutex_};
        if (!tx_.empty()) {
          out = std::move(tx_.front());
          tx_.pop_front();
          out_due = std::max(tx_free, now) + byte_time_ * static_cast<long>(out.size());
          tx_free = out_due;
        }
      }
      if (!out.empty() && now >= out_due) {
        std::size_t off = 0;
        while (off < out.size()) {
          const auto w = ::write(master_, out.data() + off, out.size() - off);
          if (w <= 0) return;
          off += static_cast<std::size_t>(w);
        }
        out.clear();
        std::lock_guard lock{mutex_};
        if (tx_.empty()) tx_done_ = out_due;
        continue;
      }
      // Consume one slice when the board is ready for it, waiting at most until the next tx slot.
      auto wake = now + std::chrono::milliseconds{2};
      if (!out.empty()) wake = std::min(wake, out_due);
      if (now < rx_free) wake = std::min(wake, rx_free);
      if (now < rx_free) {
        std::this_thread::sleep_until(wake);
        continue;
      }
      const auto wait_ns = std::max<std::int64_t>(
          0, std::chrono::duration_cast<std::chrono::nanoseconds>(wake - now).count());
      const timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000),
                        static_cast<long>(wait_ns % 1'000'000'000)};
      pollfd p{master_, POLLIN, 0};
      if (::ppoll(&p, 1, &ts, nullptr) <= 0) continue;
      if ((p.revents & POLLIN) == 0) continue;
      const auto r = ::read(master_, chunk.data(), slice);
      if (r <= 0) continue;  // EIO while no slave is open: the host is between opens
      now = clock::now();
      rx_free = std::max(rx_free, now) + byte_time_ * static_cast<long>(r);
      std::lock_guard lock{mutex_};
      rx_.insert(rx_.end(), chunk.begin(), chunk.begin() + r);
      last_rx_done_ = rx_free;
      cv_.notify_all();
    }
  }

  std::filesystem::path link_;
  std::string slave_name_;
  int master_ = -1;
  int keeper_ = -1;
  std::chrono::nanoseconds byte_time_{};
  std::thread thread_;
  std::atomic<bool> stopping_{false};

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::vector<std::byte>> tx_;
  std::vector<std::byte> rx_;
  clock::time_point last_rx_done_{};
  clock::time_point tx_done_{};
};

}  // namespace vessel::io::test
