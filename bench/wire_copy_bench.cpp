// wire::copy_bytes beside memcpy (wire/copy_bytes.hpp), warm buffers, at the distances that
// matter: destination 0 and 8 bytes past the source modulo 4 KiB (8: a pool block's payload
// into glibc's large allocation). The peer is memcpy at the same distance, in the same run.

#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstring>

#include "wire/copy_bytes.hpp"

namespace {

constexpr std::size_t mapping = std::size_t{4} << 20;

// Page-aligned source and destination (anonymous mappings), touched once.
struct buffers {
  buffers() {
    src = static_cast<std::byte*>(::mmap(nullptr, mapping, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    dst = static_cast<std::byte*>(::mmap(nullptr, mapping, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    std::memset(src, 1, mapping);
    std::memset(dst, 2, mapping);
  }
  ~buffers() {
    ::munmap(src, mapping);
    ::munmap(dst, mapping);
  }
  std::byte* src = nullptr;
  std::byte* dst = nullptr;
};

void args(benchmark::internal::Benchmark* b) {
  for (const std::int64_t distance : {0, 8}) {
    for (const std::int64_t n : {64 << 10, 512 << 10}) b->Args({n, distance});
  }
}

void BM_memcpy(benchmark::State& state) {
  buffers b;
  const auto n = static_cast<std::size_t>(state.range(0));
  std::byte* dst = b.dst + state.range(1);
  for (auto _ : state) {
    std::memcpy(dst, b.src, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_memcpy)->Apply(args);

void BM_copy_bytes(benchmark::State& state) {
  buffers b;
  const auto n = static_cast<std::size_t>(state.range(0));
  std::byte* dst = b.dst + state.range(1);
  for (auto _ : state) {
    vessel::wire::copy_bytes(dst, b.src, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_copy_bytes)->Apply(args);

}  // namespace

BENCHMARK_MAIN();
