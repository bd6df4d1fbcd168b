// The reactor's cross-thread hand-off (io/reactor.hpp): post -> run latency with the reactor asleep
// and busy, posts/s from 1 and 2 producers, and a bare eventfd ping-pong between two threads as the
// same-run peer (the floor for any wake-up of a sleeping thread on this machine).

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "io/reactor.hpp"

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

struct stamp {
  std::atomic<clock_type::rep> ran_at{0};
};

void record(void* ctx) noexcept {
  static_cast<stamp*>(ctx)->ran_at.store(clock_type::now().time_since_epoch().count(),
                                         std::memory_order_release);
}

// One-way latency from post() on this thread to the item running on the reactor thread.
// `busy`: the reactor is kept awake by a work item that re-posts itself, so no eventfd is written.
void measure_post_latency(benchmark::State& state, bool busy) {
  vessel::io::reactor r;
  if (!r.start()) {
    state.SkipWithError("no io_uring");
    return;
  }
  std::atomic<bool> spinning{busy};
  std::function<void()> spin = [&] {
    if (spinning.load(std::memory_order_relaxed)) r.post(spin);
  };
  if (busy) r.post(spin);
  stamp s;
  for (auto _ : state) {
    if (!busy) std::this_thread::sleep_for(200us);  // let the reactor fall asleep in io_uring_enter
    s.ran_at.store(0, std::memory_order_relaxed);
    const auto t0 = clock_type::now();
    r.post(vessel::io::work_item{&record, &s});
    clock_type::rep at = 0;
    while ((at = s.ran_at.load(std::memory_order_acquire)) == 0) {
    }
    state.SetIterationTime(std::chrono::duration<double>(clock_type::duration{at} - t0.time_since_epoch()).count());
  }
  spinning = false;
  r.stop();
}

void BM_post_latency_reactor_asleep(benchmark::State& state) { measure_post_latency(state, false); }
void BM_post_latency_reactor_busy(benchmark::State& state) { measure_post_latency(state, true); }
BENCHMARK(BM_post_latency_reactor_asleep)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(2000);
BENCHMARK(BM_post_latency_reactor_busy)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(20000);

void count(void* ctx) noexcept {
  auto* n = static_cast<std::atomic<std::uint64_t>*>(ctx);
  n->store(n->load(std::memory_order_relaxed) + 1, std::memory_order_release);  // one writer
}

// Posts/s: `producers` threads post `per_producer` items each; time until the reactor ran them all.
void BM_posts_per_second(benchmark::State& state) {
  const auto producers = static_cast<int>(state.range(0));
  constexpr std::uint64_t per_producer = 200'000;
  vessel::io::reactor r;
  if (!r.start()) {
    state.SkipWithError("no io_uring");
    return;
  }
  std::atomic<std::uint64_t> ran{0};
  std::uint64_t expected = 0;
  for (auto _ : state) {
    expected += per_producer * static_cast<std::uint64_t>(producers);
    const auto t0 = clock_type::now();
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([&] {
        for (std::uint64_t i = 0; i < per_producer; ++i) r.post(vessel::io::work_item{&count, &ran});
      });
    }
    for (auto& t : threads) t.join();
    while (ran.load(std::memory_order_acquire) != expected) std::this_thread::yield();
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(expected));
  r.stop();
}
BENCHMARK(BM_posts_per_second)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

// Peer: eventfd ping-pong between two threads; one-way time = RTT / 2.
void BM_eventfd_ping_pong_one_way(benchmark::State& state) {
  const int ping = ::eventfd(0, EFD_CLOEXEC);
  const int pong = ::eventfd(0, EFD_CLOEXEC);
  std::atomic<bool> done{false};
  std::thread peer{[&] {
    std::uint64_t v = 0;
    while (::read(ping, &v, sizeof v) == sizeof v && !done.load()) {
      v = 1;
      if (::write(pong, &v, sizeof v) != sizeof v) break;
    }
  }};
  std::uint64_t v = 1;
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    v = 1;
    if (::write(ping, &v, sizeof v) != sizeof v) break;
    if (::read(pong, &v, sizeof v) != sizeof v) break;
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - t0).count() / 2);
  }
  done = true;
  v = 1;
  [[maybe_unused]] auto n = ::write(ping, &v, sizeof v);
  peer.join();
  ::close(ping);
  ::close(pong);
}
BENCHMARK(BM_eventfd_ping_pong_one_way)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(20000);

}  // namespace

BENCHMARK_MAIN();
