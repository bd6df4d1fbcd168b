// What a pooled buffer costs against the peer it replaces (malloc/free of the same size), and why
// pools exist at all (a first touch of fresh memory). Run with --benchmark_repetitions=5
// --benchmark_report_aggregates_only=true and read the medians.

#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "io/buffer_pool.hpp"

namespace {

using vessel::io::buffer;
using vessel::io::buffer_pool;
using vessel::io::buffer_pool_config;

// One pool for the whole run: its construction pre-faults 84 MiB, which is set-up, not the cost
// being measured.
buffer_pool& shared_pool() {
  static buffer_pool pool{buffer_pool_config::defaults()};
  return pool;
}

void size_args(benchmark::internal::Benchmark* b) {
  b->Arg(4096)->Arg(65536)->Arg(1 << 20);
}

// Acquire then drop: the pool's whole round trip (pop, counters, push).
void pool_acquire_release(benchmark::State& state) {
  buffer_pool& pool = shared_pool();
  const auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    buffer b = pool.try_acquire(size);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(pool_acquire_release)->Apply(size_args);
BENCHMARK(pool_acquire_release)->Arg(4096)->Threads(2)->UseRealTime();

// What a message hand-off adds: one copy of the handle (the second owner) and its release.
void pool_acquire_copy_release(benchmark::State& state) {
  buffer_pool& pool = shared_pool();
  for (auto _ : state) {
    buffer b = pool.try_acquire(4096);
    buffer second = b;
    benchmark::DoNotOptimize(second.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(pool_acquire_copy_release);
BENCHMARK(pool_acquire_copy_release)->Threads(2)->UseRealTime();

// The peer: malloc/free of the same size. glibc serves this from per-thread caches and, after
// the first free raises its mmap threshold, from already-touched heap memory: its best case.
void malloc_free(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(size);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(malloc_free)->Apply(size_args);
BENCHMARK(malloc_free)->Arg(4096)->Threads(2)->UseRealTime();

// Fill 1 MiB (a receive into it, in effect) in a pooled block: memory already touched.
void pool_acquire_fill_1MiB(benchmark::State& state) {
  buffer_pool& pool = shared_pool();
  for (auto _ : state) {
    buffer b = pool.try_acquire(std::size_t{1} << 20);
    std::memset(b.data(), 0x5a, b.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (std::int64_t{1} << 20));
}
BENCHMARK(pool_acquire_fill_1MiB);

// Fill 1 MiB of fresh memory: what a large malloc costs whenever glibc hands out a new mapping
// (at or above its mmap threshold, which starts at 128 KiB). Done with mmap/munmap directly, as
// glibc does, because a malloc/free loop would reuse one touched chunk after the first round.
void fresh_alloc_fill_1MiB(benchmark::State& state) {
  constexpr std::size_t size = std::size_t{1} << 20;
  for (auto _ : state) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      break;
    }
    std::memset(p, 0x5a, size);
    benchmark::ClobberMemory();
    ::munmap(p, size);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(size));
}
BENCHMARK(fresh_alloc_fill_1MiB);

}  // namespace

BENCHMARK_MAIN();
