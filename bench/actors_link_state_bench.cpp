// Per-frame cost of the link's reliability state machines (actors/link_sender.hpp,
// actors/link_receiver.hpp): submit + transmit + ack on the send side, receive + ack decision +
// consume on the receive side, beside the least any reliable link must do per frame: keep the
// payload handle in a ring until acked (copy the slice in, drop it out).
// Each benchmark reports heap allocations per frame, which must be 0.

#include <benchmark/benchmark.h>

#include <array>
#include <cstdlib>
#include <new>

#include "actors/link_receiver.hpp"
#include "actors/link_sender.hpp"
#include "io/buffer_pool.hpp"

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

using namespace vessel;

constexpr std::size_t payload_len = 4096;
constexpr std::uint64_t ack_every = 32;  // the receiver's default coalescing

io::buffer_pool_config pool_config() {
  io::buffer_pool_config c;
  c.classes = {{payload_len, 64}};
  return c;
}

wire::frame_header data_header() {
  wire::frame_header h;
  h.body = wire::data_fields{1, 2, 77, 1000, 0, 1, payload_len, 0};
  return h;
}

void report(benchmark::State& state, std::size_t allocs) {
  state.counters["allocs_per_frame"] =
      benchmark::Counter(static_cast<double>(allocs) / static_cast<double>(state.iterations()));
  state.SetItemsProcessed(state.iterations());
}

// Baseline: the payload handle goes into a ring and leaves it after ack_every frames.
void BM_baseline_slice_ring(benchmark::State& state) {
  io::buffer_pool pool{pool_config()};
  const io::buffer_slice payload = pool.try_acquire(payload_len).slice(0, payload_len);
  std::array<io::buffer_slice, 64> ring;
  std::uint64_t seq = 0;
  std::uint64_t acked = 0;
  const std::size_t before = allocations;
  for (auto _ : state) {
    ring[++seq % ring.size()] = payload;
    if (seq - acked == ack_every) {
      while (acked < seq) ring[++acked % ring.size()].reset();
    }
    benchmark::DoNotOptimize(ring);
  }
  report(state, allocations - before);
}
BENCHMARK(BM_baseline_slice_ring);

// Sender: submit (seq, credit, bounds) + next_transmit + a cumulative ack every ack_every.
void BM_sender_submit_transmit_ack(benchmark::State& state) {
  io::buffer_pool pool{pool_config()};
  const io::buffer_slice payload = pool.try_acquire(payload_len).slice(0, payload_len);
  actors::link_sender_config c;
  c.max_unacked_frames = 64;
  c.max_queued_frames = 64;
  c.max_credit = ~std::uint64_t{0};
  c.initial_credit = std::uint64_t{1} << 62;  // credit is not what this measures
  actors::link_sender sender{c};
  const wire::frame_header header = data_header();
  std::uint64_t seq = 0;
  const std::size_t before = allocations;
  for (auto _ : state) {
    auto r = sender.submit(header, payload);
    benchmark::DoNotOptimize(r);
    const actors::outgoing_frame* f = sender.next_transmit();
    benchmark::DoNotOptimize(f);
    if (++seq % ack_every == 0) benchmark::DoNotOptimize(sender.on_ack(seq));
  }
  report(state, allocations - before);
}
BENCHMARK(BM_sender_submit_transmit_ack);

// Receiver: on_frame (seq and credit check) + poll_ack + on_consumed (grant at half window).
void BM_receiver_frame_ack_consume(benchmark::State& state) {
  actors::link_receiver_config c;
  c.ack_every_frames = ack_every;
  actors::link_receiver receiver{c};
  wire::frame_header header = data_header();
  header.payload_len = payload_len;
  std::uint64_t seq = 0;
  const std::size_t before = allocations;
  for (auto _ : state) {
    header.seq = ++seq;
    auto v = receiver.on_frame(header, actors::link_time{static_cast<std::int64_t>(seq)});
    benchmark::DoNotOptimize(v);
    benchmark::DoNotOptimize(receiver.poll_ack(actors::link_time{static_cast<std::int64_t>(seq)}));
    benchmark::DoNotOptimize(receiver.on_consumed(payload_len));
  }
  report(state, allocations - before);
}
BENCHMARK(BM_receiver_frame_ack_consume);

}  // namespace

BENCHMARK_MAIN();
