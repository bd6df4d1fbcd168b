// The reactor -> CAF hand-off (actors/event_batcher.hpp): events per second from one producer
// thread to a counting actor, batched per "turn" of N events, beside one anon_send per event.
// Counters: events/s, and hand-offs per event (1 for the per-event baseline).

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include <benchmark/benchmark.h>
#include <caf/all.hpp>

#include "actors/event_batcher.hpp"

namespace {

using vessel::actors::event_batch;
using vessel::actors::event_batcher;
using vessel::actors::event_batcher_config;

struct counter {
  std::atomic<std::uint64_t> events{0};
  std::atomic<std::uint64_t> messages{0};
};

caf::behavior counting(caf::event_based_actor*, std::shared_ptr<counter> c) {
  return {
      [c](const event_batch<std::uint64_t>& b) {
        c->events.fetch_add(b.size(), std::memory_order_relaxed);
        c->messages.fetch_add(1, std::memory_order_release);
      },
      [c](std::uint64_t) {
        c->events.fetch_add(1, std::memory_order_relaxed);
        c->messages.fetch_add(1, std::memory_order_release);
      },
  };
}

void wait_for(const counter& c, std::uint64_t events) {
  while (c.events.load(std::memory_order_acquire) < events) std::this_thread::yield();
}

struct caf_env {
  caf_env() {
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
};

// Bursts of `turn` events, one flush per burst (what the reactor does at the end of a turn).
void BM_batched(benchmark::State& state) {
  caf_env env;
  auto c = std::make_shared<counter>();
  auto sink = env.sys->spawn(counting, c);
  const auto turn = static_cast<std::uint64_t>(state.range(0));
  event_batcher<std::uint64_t> batcher{sink, nullptr, event_batcher_config{1024, 256, 16}};
  std::uint64_t pushed = 0;
  for (auto _ : state) {
    for (std::uint64_t i = 0; i < turn; ++i) batcher.push(pushed++);
    batcher.flush();
  }
  wait_for(*c, pushed);
  state.SetItemsProcessed(static_cast<std::int64_t>(pushed));
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(pushed), benchmark::Counter::kIsRate);
  state.counters["handoffs_per_event"] =
      static_cast<double>(c->messages.load()) / static_cast<double>(pushed);
  state.counters["blocks_created"] = static_cast<double>(batcher.stats().blocks_created);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}
BENCHMARK(BM_batched)->Arg(1)->Arg(16)->Arg(256)->Arg(4096)->UseRealTime();

// The baseline: one anon_send per event, `turn` events per iteration.
void BM_per_event(benchmark::State& state) {
  caf_env env;
  auto c = std::make_shared<counter>();
  auto sink = env.sys->spawn(counting, c);
  const auto turn = static_cast<std::uint64_t>(state.range(0));
  std::uint64_t pushed = 0;
  for (auto _ : state) {
    for (std::uint64_t i = 0; i < turn; ++i) caf::anon_send(sink, pushed++);
  }
  wait_for(*c, pushed);
  state.SetItemsProcessed(static_cast<std::int64_t>(pushed));
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(pushed), benchmark::Counter::kIsRate);
  state.counters["handoffs_per_event"] =
      static_cast<double>(c->messages.load()) / static_cast<double>(pushed);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}
BENCHMARK(BM_per_event)->Arg(16)->Arg(256)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
