// Serial frame round trip over a pty with an unpaced echo board on the master: the serial
// transport (io_uring reads/writes on the reactor, wire's decoder, timers) beside the plain way a
// host library (pyserial, libserialport) talks to a tty: blocking write() and read() on the same
// raw fd, same frame encoding and decoder. A pty moves bytes at memory speed, so this measures the
// software path per frame, which is what a fast UART (4 Mbaud: 64 us per 32-byte frame) leaves.

#include <benchmark/benchmark.h>

#include <pty.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io/reactor.hpp"
#include "io/serial_transport.hpp"
#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"

namespace {

using namespace vessel;

// Echoes every byte the host writes, at once.
class echo_board {
 public:
  echo_board() {
    char name[256] = {};
    if (::openpty(&master_, &keeper_, name, nullptr, nullptr) != 0) throw std::runtime_error("openpty");
    slave_ = name;
    thread_ = std::thread([this] {
      std::array<char, 512> buf{};
      while (!stop_.load(std::memory_order_relaxed)) {
        const auto n = ::read(master_, buf.data(), buf.size());
        if (n <= 0) return;  // EIO once the keeper and the host are gone
        if (::write(master_, buf.data(), static_cast<std::size_t>(n)) != n) return;
      }
    });
  }
  ~echo_board() {
    stop_.store(true);
    ::close(keeper_);  // the host closed first: the master's read now fails with EIO
    thread_.join();
    ::close(master_);
  }
  const std::string& slave() const { return slave_; }

 private:
  int master_ = -1;
  int keeper_ = -1;
  std::string slave_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct counting_handler final : io::serial_handler {
  void on_serial_frame(std::span<const std::byte> payload) override {
    ++frames;
    bytes += payload.size();
  }
  void on_closed(std::error_code) override { closed = true; }
  std::uint64_t frames = 0;
  std::uint64_t bytes = 0;
  bool closed = false;
};

void BM_serial_transport_echo_rtt(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  echo_board board;
  io::reactor_config rc;
  rc.own_thread = false;
  io::reactor r{rc};
  if (!r.start()) return state.SkipWithError("reactor start failed");
  counting_handler h;
  io::serial_config c;
  c.path = board.slave();
  c.baud = 4000000;
  auto t = io::serial_transport::open(r, c, h);
  if (!t) return state.SkipWithError(t.error().message().c_str());
  std::vector<std::byte> payload(size, std::byte{0x5C});
  for (auto _ : state) {
    const auto want = h.frames + 1;
    if (!t.value()->send_frame(payload)) return state.SkipWithError("send_frame failed");
    while (h.frames < want) r.run_once(std::chrono::milliseconds{100});
  }
  t.value()->close();
  while (!h.closed) r.run_once(std::chrono::milliseconds{10});
  r.stop();
  while (r.run_once(std::chrono::milliseconds{10})) {
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(h.frames));
}

// The peer: blocking syscalls on the same raw tty, the same encoder and decoder.
void BM_blocking_tty_echo_rtt(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  echo_board board;
  io::serial_config c;
  c.path = board.slave();
  c.baud = 4000000;
  auto port = io::serial_port::open(c);
  if (!port) return state.SkipWithError(port.error().message().c_str());
  wire::serial_decoder decoder{c.baud};
  std::vector<std::byte> payload(size, std::byte{0x5C});
  std::array<std::byte, wire::serial_max_frame_bytes> frame{};
  std::array<std::byte, 512> rx{};
  std::uint64_t frames = 0;
  for (auto _ : state) {
    const auto n = wire::encode_serial_frame(payload, frame).value();
    if (::write(port.value().fd(), frame.data(), n) != static_cast<ssize_t>(n)) {
      return state.SkipWithError("write failed");
    }
    for (;;) {
      if (decoder.next()) break;
      const auto got = ::read(port.value().fd(), rx.data(), rx.size());
      if (got <= 0) return state.SkipWithError("read failed");
      decoder.feed({rx.data(), static_cast<std::size_t>(got)});
    }
    ++frames;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(frames));
}

BENCHMARK(BM_serial_transport_echo_rtt)->Arg(16)->Arg(253)->UseRealTime();
BENCHMARK(BM_blocking_tty_echo_rtt)->Arg(16)->Arg(253)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
