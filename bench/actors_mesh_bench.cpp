// Mesh round trips in one process: rank 0 sends, rank 1 echoes the delivered block back, each
// rank on its own reactor thread, over loopback TCP or shm. One benchmark iteration is a chain
// of `chain` round trips driven from the reactors (no app-thread hand-off per message), so
// us_per_roundtrip is the mesh path alone. allocs_per_roundtrip counts operator new calls during
// the chain: the steady-state send/receive path should make none.

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <new>
#include <thread>

#include <benchmark/benchmark.h>

#include "actors/kv_store_client.hpp"
#include "actors/kv_store_server.hpp"
#include "actors/mesh.hpp"
#include "io/reactor.hpp"
#include "tests/support/counting_new.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

constexpr int chain = 2000;

class echo_node final : public mesh_observer {
 public:
  std::unique_ptr<io::reactor> reactor = std::make_unique<io::reactor>();
  std::unique_ptr<mesh> m;
  std::size_t size = 8;
  int remaining = 0;
  std::promise<void>* done = nullptr;

  void on_message(inbound_message&& msg) override {
    m->release(msg.src, vessel::actors::message_credit(msg.payload.size()));
    if (m->config().self_rank == 1) {  // echo the very block back: no copy
      (void)m->send(0, msg.tag, std::move(msg.payload));
      return;
    }
    if (--remaining > 0) return ping();
    done->set_value();
  }
  void on_peer_state(std::uint32_t, peer_state, std::error_code) override {}

  void ping() {
    io::buffer b = m->pool().try_acquire(size);
    (void)m->send(1, 7, std::move(b).slice(0, size));
  }
};

struct pair_fixture {
  explicit pair_fixture(mesh_transport t)
      : token{std::move(cluster_token::from_bytes(
                            std::vector<std::byte>(32, std::byte{'b'}), "bench")
                            .value())},
        server{store_reactor} {
    (void)store_reactor.start();
    (void)server.listen(io::socket_address::loopback_v4(0));
    (void)server.start();
    std::vector<std::thread> threads;
    for (std::uint32_t i = 0; i < 2; ++i) {
      (void)nodes[i].reactor->start();
      mesh_config c;
      c.self_rank = i;
      c.world_size = 2;
      c.incarnation = i + 1;
      c.token = &token;
      c.transport = t;
      c.store_prefix = "bench";
      c.pool.classes = {{4096, 256}, {64u << 10, 64}};
      nodes[i].m = std::make_unique<mesh>(*nodes[i].reactor, c, nodes[i]);
      threads.emplace_back([this, i] {
        auto client = kv_store_client::connect({"127.0.0.1", server.port()}, 10s);
        if (client) (void)nodes[i].m->connect(*client.value(), 10s);
      });
    }
    for (auto& th : threads) th.join();
  }
  ~pair_fixture() {
    for (auto& n : nodes) n.m->close();
    for (auto& n : nodes) n.m.reset();
    for (auto& n : nodes) n.reactor->stop();
    server.stop();
    store_reactor.stop();
  }

  /// Runs one chain of round trips; returns its wall time.
  std::chrono::nanoseconds run_chain(std::size_t size) {
    std::promise<void> done;
    auto& n0 = nodes[0];
    n0.size = size;
    n0.remaining = chain;
    n0.done = &done;
    const auto start = std::chrono::steady_clock::now();
    n0.reactor->post([&n0] { n0.ping(); });
    done.get_future().wait();
    return std::chrono::steady_clock::now() - start;
  }

  cluster_token token;
  io::reactor store_reactor;
  kv_store_server server;
  echo_node nodes[2];
};

void round_trip(benchmark::State& state, mesh_transport t) {
  pair_fixture f{t};
  const auto size = static_cast<std::size_t>(state.range(0));
  f.run_chain(size);  // warm-up: pools, queues and timers reach their steady state
  std::chrono::nanoseconds total{};
  std::uint64_t allocs = 0;
  for (auto _ : state) {
    const auto before = vessel::test::allocations();
    total += f.run_chain(size);
    allocs += vessel::test::allocations() - before;
  }
  const double trips = static_cast<double>(state.iterations()) * chain;
  state.counters["us_per_roundtrip"] =
      std::chrono::duration<double, std::micro>(total).count() / trips;
  state.counters["allocs_per_roundtrip"] = static_cast<double>(allocs) / trips;
  state.SetBytesProcessed(static_cast<std::int64_t>(trips * 2 * static_cast<double>(size)));
}

void BM_mesh_round_trip_tcp(benchmark::State& s) { round_trip(s, mesh_transport::tcp); }
void BM_mesh_round_trip_shm(benchmark::State& s) { round_trip(s, mesh_transport::shm); }

BENCHMARK(BM_mesh_round_trip_tcp)->Arg(8)->Arg(64 << 10)->Iterations(3)->UseRealTime();
BENCHMARK(BM_mesh_round_trip_shm)->Arg(8)->Arg(64 << 10)->Iterations(3)->UseRealTime();

}  // namespace
}  // namespace vessel::actors

BENCHMARK_MAIN();
