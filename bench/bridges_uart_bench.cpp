// The UART host engine's per-frame cost on receive (bridges/uart) beside the raw serial decoder
// (wire/serial_decoder.hpp) in the same run, on the same bytes: reply frames as a board sends
// them (reliable DATA carrying a 12-byte reply). BM_raw_decode only splits the bytes into frames;
// BM_engine_receive does what uart_link does per received frame on top: the link check, the
// sequence and session logic, the ACK it encodes as a serial frame, and parsing the reply. The
// tty syscalls (shared by both) are left out. For scale: 115200 baud carries ~600 such frames/s.
// Measured (release, 2-core VM under heavy load, CPU time, medians of 5): raw decode 32 ns/frame,
// engine receive 55 ns/frame: the link layer adds ~23 ns per frame, a 1.7x ratio, and one core
// could take ~18 M frames/s, 30,000x what 115200 baud delivers.

#include <benchmark/benchmark.h>

#include <array>
#include <cstring>
#include <vector>

#include "bridges/uart/command.hpp"
#include "bridges/uart/link_header.hpp"
#include "bridges/uart/reliable_channel.hpp"
#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"

namespace {

using namespace vessel;
using namespace vessel::bridges::uart;

constexpr int frames_per_burst = 64;  // one full turn of the sequence numbers

std::vector<std::byte> link_frame(link_type type, unsigned seq, std::span<const std::byte> body) {
  std::vector<std::byte> payload(link_header_bytes + body.size());
  const auto h = link_header(type, seq);
  payload[0] = std::byte{h};
  payload[1] = std::byte{link_check(h, body)};
  std::memcpy(payload.data() + 2, body.data(), body.size());
  std::vector<std::byte> frame(wire::serial_frame_size(payload.size()));
  (void)wire::encode_serial_frame(payload, frame);
  return frame;
}

// 64 reply frames with seq 0..63: fed in a loop they are always the next in order.
std::vector<std::byte> reply_burst() {
  std::vector<std::byte> burst;
  for (unsigned seq = 0; seq < frames_per_burst; ++seq) {
    std::array<std::byte, 16> msg{};
    const std::array<std::byte, 8> body{};
    const auto n = encode_reply(0x01, static_cast<std::uint16_t>(seq + 1), reply_status::ok, body, msg);
    const auto f = link_frame(link_type::data, seq, {msg.data(), n.value()});
    burst.insert(burst.end(), f.begin(), f.end());
  }
  return burst;
}

void feed(wire::serial_decoder& dec, std::span<const std::byte> bytes, auto&& on_frame) {
  while (!bytes.empty()) {
    bytes = bytes.subspan(dec.feed(bytes, wire::serial_decoder::clock::time_point{}));
    while (auto p = dec.next()) on_frame(*p);
  }
}

void BM_raw_decode(benchmark::State& state) {
  const auto burst = reply_burst();
  wire::serial_decoder dec{115200, 10};
  std::size_t frames = 0;
  for (auto _ : state) {
    feed(dec, burst, [&](std::span<const std::byte> p) {
      benchmark::DoNotOptimize(p.data());
      ++frames;
    });
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(frames));
  state.counters["ns_per_frame"] = benchmark::Counter(
      static_cast<double>(frames), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_raw_decode);

// What uart_link does with each frame, minus the transport: check, sequence, ack, match.
struct engine_sink final : channel_sink {
  void write_link_payload(std::span<const std::byte> payload) override {
    std::array<std::byte, wire::serial_max_frame_bytes> frame;
    benchmark::DoNotOptimize(wire::encode_serial_frame(payload, frame));  // as send_frame does
    ++acks;
  }
  void deliver(std::span<const std::byte> message, bool) override {
    const auto m = parse_message(message);
    if (m && m->what == board_message::kind::reply) ids += m->request_id;
  }
  std::uint64_t acks = 0;
  std::uint64_t ids = 0;
};

void BM_engine_receive(benchmark::State& state) {
  const auto burst = reply_burst();
  wire::serial_decoder dec{115200, 10};
  engine_sink sink;
  reliable_channel ch{reliable_channel_config{}, sink};
  const auto now = reliable_channel::clock::now();
  ch.start(1, now);
  // The board's SYN at seq 63: the next DATA expected is seq 0, the burst's first.
  const std::array<std::byte, 1> session{std::byte{0x42}};
  feed(dec, link_frame(link_type::syn, 63, session), [&](auto p) { ch.on_link_payload(p, now); });
  std::size_t frames = 0;
  for (auto _ : state) {
    feed(dec, burst, [&](std::span<const std::byte> p) {
      ch.on_link_payload(p, now);
      ++frames;
    });
  }
  if (ch.stats().delivered_reliable != frames) state.SkipWithError("frames not delivered in order");
  benchmark::DoNotOptimize(sink.ids);
  state.SetItemsProcessed(static_cast<std::int64_t>(frames));
  state.counters["ns_per_frame"] = benchmark::Counter(
      static_cast<double>(frames), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_engine_receive);

}  // namespace

BENCHMARK_MAIN();
