// CRC32C throughput (wire/crc32c.hpp), the dispatched path and the portable table, beside memcpy
// into a warm buffer measured in the same run: the checksum is on the payload path, so the question
// is what it costs next to the one copy a frame already pays. Target: >= 5 GB/s from 64 KiB up.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "wire/crc32c.hpp"

namespace {

using namespace vessel::wire;

std::vector<std::byte> random_buffer(std::size_t n) {
  std::mt19937 rng{20261129};
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

void sizes(benchmark::internal::Benchmark* b) {
  for (const std::int64_t n : {64, 4 << 10, 64 << 10, 1 << 20}) b->Arg(n);
}

void BM_crc32c(benchmark::State& state) {
  const auto data = random_buffer(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(crc32c(data));
  state.SetBytesProcessed(state.iterations() * state.range(0));
  state.SetLabel(std::string{crc32c_implementation()});
}
BENCHMARK(BM_crc32c)->Apply(sizes);

void BM_crc32c_table(benchmark::State& state) {
  const auto data = random_buffer(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(crc32c_extend_table(0, data));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_crc32c_table)->Apply(sizes);

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

}  // namespace

BENCHMARK_MAIN();
