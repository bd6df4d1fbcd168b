// One actor message between two CAF actors that share a thread: two residents of one reactor
// (actors/reactor_hosted.hpp) against the same two actors on CAF's own scheduler with one worker,
// the same-run peer. A request/response round trip is two messages; time is per message ("hop").
// This is the floor under the actor API's latency: an app actor's receive and its next send
// are one hop each beside the transport (vessel-bench p2p, p2p.hosted rows).

#include <chrono>
#include <cstdint>
#include <memory>

#include <benchmark/benchmark.h>
#include <caf/all.hpp>

#include "actors/reactor_hosted.hpp"
#include "io/reactor.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using run_atom = caf::atom_constant<caf::atom("run")>;

constexpr std::uint64_t round_trips_per_iteration = 10000;

// Requests `left` more round trips from `peer`, one at a time, as an app's loop does.
void ping(caf::event_based_actor* self, const caf::actor& peer, std::uint64_t left,
          caf::response_promise done) {
  if (left == 0) {
    done.deliver(true);
    return;
  }
  self->request(peer, caf::infinite, ping_atom::value, left)
      .then([=](std::uint64_t) { ping(self, peer, left - 1, done); });
}

caf::behavior pinger(caf::event_based_actor* self) {
  return {[self](run_atom, const caf::actor& peer, std::uint64_t n) {
    auto done = self->make_response_promise();
    ping(self, peer, n, done);
    return done;
  }};
}

caf::behavior ponger(caf::event_based_actor*) {
  return {[](ping_atom, std::uint64_t n) { return n; }};
}

using vessel::actors::on_reactor_thread;
using vessel::actors::reactor_execution_unit;

class resident_pinger final : public on_reactor_thread<caf::event_based_actor> {
 public:
  using on_reactor_thread::on_reactor_thread;
  caf::behavior make_behavior() override { return pinger(this); }
};

class resident_ponger final : public on_reactor_thread<caf::event_based_actor> {
 public:
  using on_reactor_thread::on_reactor_thread;
  caf::behavior make_behavior() override { return ponger(this); }
};

void measure(benchmark::State& state, caf::actor_system& sys, const caf::actor& a,
             const caf::actor& b) {
  caf::scoped_actor self{sys};
  auto run = [&](std::uint64_t n) {
    self->request(a, caf::infinite, run_atom::value, b, n)
        .receive([](bool) {}, [&](caf::error& e) { state.SkipWithError(caf::to_string(e).c_str()); });
  };
  run(round_trips_per_iteration / 10);  // warm-up: allocator caches, the reactor's vectors
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    run(round_trips_per_iteration);
    const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    // The scoped actor's request and answer (two thread crossings) are in the time, once per
    // 10,000 round trips.
    state.SetIterationTime(s / static_cast<double>(2 * round_trips_per_iteration));
  }
  self->send_exit(a, caf::exit_reason::kill);
  self->send_exit(b, caf::exit_reason::kill);
}

caf::actor_system_config& one_worker(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", 1);
  return cfg;
}

void BM_hop_between_residents(benchmark::State& state) {
  caf::actor_system_config cfg;
  caf::actor_system sys{one_worker(cfg)};
  vessel::io::reactor reactor;
  if (!reactor.start()) {
    state.SkipWithError("no io_uring");
    return;
  }
  reactor_execution_unit unit{sys, reactor};
  measure(state, sys, sys.spawn<resident_pinger>(&unit), sys.spawn<resident_ponger>(&unit));
  reactor.stop();
}

void BM_hop_on_one_caf_worker(benchmark::State& state) {
  caf::actor_system_config cfg;
  caf::actor_system sys{one_worker(cfg)};
  measure(state, sys, sys.spawn(pinger), sys.spawn(ponger));
}

}  // namespace

BENCHMARK(BM_hop_between_residents)->UseManualTime()->Unit(benchmark::kNanosecond)->Iterations(20);
BENCHMARK(BM_hop_on_one_caf_worker)->UseManualTime()->Unit(benchmark::kNanosecond)->Iterations(20);
BENCHMARK_MAIN();
