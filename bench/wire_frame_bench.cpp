// Header encode + decode cost per frame (wire/frame_codec.hpp, wire/stream_decoder.hpp).
// The payload is never touched: it travels as the second iovec on send and is received in place.
// Each benchmark also reports heap allocations per frame, which must be 0 on this path.

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "wire/frame_codec.hpp"
#include "wire/stream_decoder.hpp"

namespace {
// Counts every operator new in this program; read around the timed loop only.
std::size_t allocations = 0;
}  // namespace

// noinline: once inlined, g++ 12 pairs the malloc with free and warns of a new/delete mismatch.
[[gnu::noinline]] void* operator new(std::size_t n) {
  ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using namespace vessel::wire;

constexpr std::uint32_t payload_len = 4096;

frame_header data_header() {
  frame_header h;
  h.seq = 1;
  h.payload_len = payload_len;
  h.crc32c = 0x12345678;
  h.body = data_fields{1, 2, 77, 1000, 0, 1, payload_len, 0};
  return h;
}

void report_allocations(benchmark::State& state, std::size_t before) {
  state.counters["allocs_per_frame"] = benchmark::Counter(
      static_cast<double>(allocations - before), benchmark::Counter::kAvgIterations);
}

void BM_header_encode_decode(benchmark::State& state) {
  frame_encoder encoder;
  stream_decoder decoder;
  frame_header header = data_header();
  const std::vector<std::byte> payload(payload_len);
  const std::size_t before = allocations;
  for (auto _ : state) {
    ++header.seq;
    auto iov = encoder.encode(header, payload);
    // Receive: the header bytes land in the decoder's buffer; the payload's place is committed
    // as received (as a recv into prepare() would fill it) but never written or read here.
    auto space = decoder.prepare();
    std::memcpy(space.data(), iov.value()[0].iov_base, iov.value()[0].iov_len);
    decoder.commit(iov.value()[0].iov_len + payload_len);
    auto frame = decoder.next();
    if (!frame || !frame.value() || frame.value()->header.seq != header.seq) {
      state.SkipWithError("frame did not round-trip");
      break;
    }
    benchmark::DoNotOptimize(frame);
  }
  report_allocations(state, before);
}
BENCHMARK(BM_header_encode_decode);

void BM_header_encode(benchmark::State& state) {
  frame_encoder encoder;
  frame_header header = data_header();
  const std::vector<std::byte> payload(payload_len);
  const std::size_t before = allocations;
  for (auto _ : state) {
    ++header.seq;
    auto iov = encoder.encode(header, payload);
    benchmark::DoNotOptimize(iov);
  }
  report_allocations(state, before);
}
BENCHMARK(BM_header_encode);

void BM_header_decode(benchmark::State& state) {
  frame_encoder encoder;
  stream_decoder decoder;
  const std::vector<std::byte> payload(payload_len);
  const auto iov = encoder.encode(data_header(), payload).value();
  const std::size_t before = allocations;
  for (auto _ : state) {
    auto space = decoder.prepare();
    std::memcpy(space.data(), iov[0].iov_base, iov[0].iov_len);
    decoder.commit(iov[0].iov_len + payload_len);
    auto frame = decoder.next();
    benchmark::DoNotOptimize(frame);
  }
  report_allocations(state, before);
}
BENCHMARK(BM_header_decode);

}  // namespace

BENCHMARK_MAIN();
