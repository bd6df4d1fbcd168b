// Reduction kernels (collectives/reduce.hpp) beside memcpy of the same bytes in the same run.
// reduce_into reads two operands and writes one, so its rate counts three streams (2 reads +
// 1 write) against memcpy's two (1 read + 1 write): at memory bandwidth the ratio is near 1.
// Sizes are bytes per operand: 8 B (call overhead), 64 KiB (L1/L2), 1 MiB (L2), 64 MiB (memory).

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectives/half.hpp"
#include "collectives/reduce.hpp"

namespace {

using namespace vessel::collectives;

std::vector<std::byte> random_operand(std::size_t bytes, dtype t, std::uint32_t seed) {
  std::mt19937 rng{seed};
  std::vector<std::byte> out(bytes);
  const std::size_t width = size_of(t);
  for (std::size_t at = 0; at + width <= bytes; at += width) {
    // Finite values in [-2, 2): no NaN or subnormal slow paths that real gradients rarely hit.
    const float value = static_cast<float>(rng() % 4096) / 1024.0f - 2.0f;
    if (t == dtype::float32) {
      std::memcpy(out.data() + at, &value, 4);
    } else {
      const std::uint16_t h =
          t == dtype::float16 ? float_to_float16(value) : float_to_bfloat16(value);
      std::memcpy(out.data() + at, &h, 2);
    }
  }
  return out;
}

void sizes(benchmark::internal::Benchmark* b) {
  // 8 B: the per-call cost an 8-byte allreduce pays.
  for (const std::int64_t n : {8, 64 << 10, 1 << 20, 64 << 20}) b->Arg(n);
}

void run_reduce(benchmark::State& state, dtype t, kernel_isa isa) {
  if (!kernel_isa_supported(isa)) {
    state.SkipWithError("kernel set not supported by this CPU");
    return;
  }
  const auto bytes = static_cast<std::size_t>(state.range(0));
  auto inout = random_operand(bytes, t, 1);
  const auto in = random_operand(bytes, t, 2);
  for (auto _ : state) {
    // Summing into the same buffer keeps values bounded enough: bytes of traffic are the point.
    auto r = reduce_into(inout, in, t, reduce_op::sum, isa);
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 3 * state.range(0));
  state.SetLabel(std::string{to_string(isa)});
}

void BM_reduce_f32_sum(benchmark::State& state) {
  run_reduce(state, dtype::float32, default_kernel_isa());
}
BENCHMARK(BM_reduce_f32_sum)->Apply(sizes);

void BM_reduce_f32_sum_portable(benchmark::State& state) {
  run_reduce(state, dtype::float32, kernel_isa::portable);
}
BENCHMARK(BM_reduce_f32_sum_portable)->Apply(sizes);

void BM_reduce_bf16_sum(benchmark::State& state) {
  run_reduce(state, dtype::bfloat16, default_kernel_isa());
}
BENCHMARK(BM_reduce_bf16_sum)->Apply(sizes);

void BM_reduce_bf16_sum_portable(benchmark::State& state) {
  run_reduce(state, dtype::bfloat16, kernel_isa::portable);
}
BENCHMARK(BM_reduce_bf16_sum_portable)->Apply(sizes);

void BM_reduce_f16_sum(benchmark::State& state) {
  run_reduce(state, dtype::float16, default_kernel_isa());
}
BENCHMARK(BM_reduce_f16_sum)->Apply(sizes);

void BM_reduce_f16_sum_portable(benchmark::State& state) {
  run_reduce(state, dtype::float16, kernel_isa::portable);
}
BENCHMARK(BM_reduce_f16_sum_portable)->Apply(sizes);

// out = a op b into a third buffer, as a ring's reducing step does (its input and a peer's chunk
// into the output): the same three streams as reduce_into.
void BM_reduce_to_f32_sum(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const auto a = random_operand(bytes, dtype::float32, 1);
  const auto b = random_operand(bytes, dtype::float32, 2);
  std::vector<std::byte> out(bytes, std::byte{0});
  for (auto _ : state) {
    auto r = reduce_to(out, a, b, dtype::float32, reduce_op::sum);
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 3 * state.range(0));
  state.SetLabel(std::string{to_string(default_kernel_isa())});
}
BENCHMARK(BM_reduce_to_f32_sum)->Apply(sizes);

void BM_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const auto src = random_operand(bytes, dtype::float32, 3);
  std::vector<std::byte> dst(bytes, std::byte{0});  // touched: no page faults in the loop
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * state.range(0));
}
BENCHMARK(BM_memcpy)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
