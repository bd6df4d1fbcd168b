// Serial frame codec costs (wire/crc8.hpp, wire/serial_decoder.hpp). CRC-8 runs beside memcpy of the
// same bytes in the same run, so its cost reads against the one copy every byte already pays; the
// decoder runs in frames per second. For scale: a UART at 115200 8N1 moves 11.5 KB/s, i.e. 45 largest
// frames per second (1 Mbaud: 390), so the question is how small a share of a core the codec takes.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "wire/crc8.hpp"
#include "wire/serial_decoder.hpp"
#include "wire/serial_frame.hpp"

namespace {

using namespace vessel::wire;

std::vector<std::byte> random_buffer(std::size_t n) {
  std::mt19937 rng{20261129};
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

void sizes(benchmark::internal::Benchmark* b) {
  for (const std::int64_t n : {16, 256, 4 << 10}) b->Arg(n);
}

void BM_crc8(benchmark::State& state) {
  const auto data = random_buffer(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(data.data());
    benchmark::DoNotOptimize(crc8(data));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_crc8)->Apply(sizes);

void BM_memcpy(benchmark::State& state) {
  const auto src = random_buffer(static_cast<std::size_t>(state.range(0)));
  std::vector<std::byte> dst(src.size(), std::byte{0});  // touched: no page faults in the loop
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_memcpy)->Apply(sizes);

// One iteration feeds a 16-frame burst (as a UART read returns it) and drains the decoder:
// ring copy in, hunt, CRC-8 over len + payload, payload copy out.
void BM_serial_decode(benchmark::State& state) {
  constexpr int frames_per_burst = 16;
  const auto payload = random_buffer(static_cast<std::size_t>(state.range(0)));
  std::vector<std::byte> burst;
  std::vector<std::byte> frame(serial_frame_size(payload.size()));
  for (int i = 0; i < frames_per_burst; ++i) {
    const auto n = encode_serial_frame(payload, frame).value();
    burst.insert(burst.end(), frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(n));
  }
  serial_decoder decoder(std::chrono::milliseconds{100}, std::max(burst.size(), serial_max_frame_bytes));
  const serial_decoder::clock::time_point now{};
  for (auto _ : state) {
    decoder.feed(burst, now);
    while (auto f = decoder.next()) benchmark::DoNotOptimize(f->data());
  }
  if (decoder.counters().frames_ok != static_cast<std::uint64_t>(state.iterations()) * frames_per_burst) {
    state.SkipWithError("decoder lost frames");
  }
  state.SetItemsProcessed(state.iterations() * frames_per_burst);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(burst.size()));
}
BENCHMARK(BM_serial_decode)->Arg(0)->Arg(16)->Arg(64)->Arg(253);

}  // namespace

BENCHMARK_MAIN();
