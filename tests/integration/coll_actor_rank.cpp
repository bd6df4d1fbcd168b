// One rank of the collective actor's scenarios over real ranks (coll_actor_test.cpp):
//   coll_actor_rank serve      every operation through the actor, all requests in flight at
//                              once (plus allreduces of several sizes), each answer equal to
//                              what the blocking communicator gave for the same call
//   coll_actor_rank rankdeath  the last rank dies for good after a barrier; the survivors'
//                              allreduce is answered with errc::rank_failed naming it, and the
//                              actor keeps serving (a later barrier: the same error, at once)
//   coll_actor_rank latency    8-byte allreduce medians, blocking and through the actor
// The actor runs under a node's root supervisor (the node here is only the CAF side: a world of
// one; the ranks talk through vessel::comm's runtime). Prints "OK rank <r> coll_actor <mode>".

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/actor_errc.hpp"
#include "actors/comm.hpp"
#include "actors/node.hpp"
#include "collectives/collective_actor.hpp"
#include "collectives/collective_driver.hpp"
#include "collectives/communicator.hpp"
#include "collectives/errc.hpp"
#include "collectives/operation.hpp"
#include "tests/unit/collectives/blocking_collective.hpp"

namespace {

using namespace vessel::collectives;
using namespace std::chrono_literals;
using bytes = std::vector<std::byte>;

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

bytes int32s(std::uint32_t rank, std::size_t n, std::int32_t salt) {
  bytes b(n * 4);
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = static_cast<std::int32_t>((rank * 131 + i * 7 + salt) % 1000) - 500;
    std::memcpy(b.data() + i * 4, &v, 4);
  }
  return b;
}

collective_call make_call(collective_op op, bytes input, std::uint32_t root) {
  collective_call c;
  c.op = op;
  c.type = dtype::int32;
  c.reduction = reduce_op::sum;
  c.root = root;
  c.input = std::move(input);
  return c;
}

bytes blocking(communicator& comm, const collective_call& c) {
  auto n = collective_driver::output_bytes(c, comm.size());
  if (!n) {
    check(false, "output_bytes");
    return {};
  }
  bytes out(n.value());
  const vessel::result<void> r = test_support::run_blocking(comm, c, out);
  check(r.has_value(), std::string{"blocking "} + std::string{to_string(c.op)});
  return out;
}

// What of an output the comparison looks at: reduce's and gather's only at the root.
bool meaningful(const collective_call& c, std::uint32_t rank) {
  return !(c.op == collective_op::reduce || c.op == collective_op::gather) || rank == c.root;
}

vessel::node_config actor_node() {
  vessel::node_config cfg;  // a world of one: the CAF side only
  cfg.pool.classes = {vessel::io::size_class_config{4096, 64}};
  return cfg;
}

int serve(vessel::comm& world, communicator& comm) {
  const std::uint32_t rank = comm.rank(), size = comm.size();
  const std::uint32_t root = size - 1;
  std::vector<collective_call> calls;
  for (collective_op op : all_collective_ops) {
    const bool blocks = op == collective_op::reduce_scatter || op == collective_op::scatter ||
                        op == collective_op::alltoall;
    const std::size_t n = blocks ? 5 * std::size_t{size} : 23;
    calls.push_back(
        make_call(op, op == collective_op::barrier ? bytes{} : int32s(rank, n, 1), root));
  }
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 18}) {
    calls.push_back(make_call(collective_op::allreduce, int32s(rank, n, int(n)), 0));
  }
  std::vector<bytes> expected;
  for (const auto& c : calls) expected.push_back(blocking(comm, c));

  auto driver = std::make_shared<collective_driver>(comm, world.runtime());
  {
    vessel::node node{actor_node()};
    auto spawned = node.spawn_supervised(collective_actor_child("collectives", driver));
    if (!spawned) {
      std::printf("FAIL spawn: %s\n", spawned.error().message().c_str());
      return 1;
    }
    const auto coll = caf::actor_cast<collective_actor>(spawned.value());
    {  // the scoped actor goes before node.stop(), which waits for every actor
      caf::scoped_actor self{node.system()};
      using handle_t = decltype(self->request(coll, 60s, coll_atom::value, collective_call{}));
      std::vector<handle_t> sent;
      for (const auto& c : calls) sent.push_back(self->request(coll, 120s, coll_atom::value, c));
      for (std::size_t i = calls.size(); i-- > 0;) {  // reverse: answers matched, not ordered
        const std::string what = std::string{to_string(calls[i].op)} + " #" + std::to_string(i);
        sent[i].receive(
            [&](collective_result& r) {
              if (!meaningful(calls[i], rank)) return;
              check(r.output == expected[i], what + ": differs from the blocking call's output");
            },
            [&](caf::error& e) { check(false, what + ": " + vessel::actors::describe(e)); });
      }
      collective_actor_stats st;
      self->request(coll, 60s, vessel::actors::stats_atom::value)
          .receive([&](collective_actor_stats& s) { st = s; },
                   [&](caf::error& e) { check(false, "stats: " + vessel::actors::describe(e)); });
      check(st.answered == calls.size() && st.errors == 0 && st.pending == 0, "actor stats");
      std::printf("rank %u: %zu collectives through the actor; driver started %llu, forced %llu\n",
                  rank, calls.size(), static_cast<unsigned long long>(st.driver.started),
                  static_cast<unsigned long long>(st.driver.forced));
    }
    node.stop();
  }
  driver.reset();
  return 0;
}

// 8-byte allreduces one after another: blocking calls, then requests to the actor (each sent
// once the previous answer came). Prints the medians; no assertion on them (a loaded machine).
int latency(vessel::comm& world, communicator& comm) {
  constexpr int calls = 200;
  const collective_call c = make_call(collective_op::allreduce, int32s(comm.rank(), 2, 0), 0);
  auto median_us = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> blocking_us, actor_us;
  for (int i = 0; i < calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)blocking(comm, c);
    blocking_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  auto driver = std::make_shared<collective_driver>(comm, world.runtime());
  vessel::node node{actor_node()};
  auto spawned = node.spawn_supervised(collective_actor_child("collectives", driver));
  if (!spawned) return 1;
  const auto coll = caf::actor_cast<collective_actor>(spawned.value());
  {
    caf::scoped_actor self{node.system()};
    for (int i = 0; i < calls; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      self->request(coll, 60s, coll_atom::value, c)
          .receive([](collective_result&) {},
                   [&](caf::error& e) { check(false, vessel::actors::describe(e)); });
      actor_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::printf("rank %u: 8 B allreduce median: blocking %.1f us, through the actor %.1f us\n",
              comm.rank(), median_us(blocking_us), median_us(actor_us));
  node.stop();
  driver.reset();
  return 0;
}

int rankdeath(vessel::comm& world, communicator& comm) {
  const std::uint32_t rank = comm.rank(), victim = comm.size() - 1;
  auto driver = std::make_shared<collective_driver>(comm, world.runtime());
  vessel::node node{actor_node()};
  auto spawned = node.spawn_supervised(collective_actor_child("collectives", driver));
  if (!spawned) {
    std::printf("FAIL spawn: %s\n", spawned.error().message().c_str());
    return 1;
  }
  const auto coll = caf::actor_cast<collective_actor>(spawned.value());
  auto self = std::make_unique<caf::scoped_actor>(node.system());  // reset before node.stop()
  auto ask = [&](collective_call c, const std::string& what) {
    caf::error err;
    (*self)
        ->request(coll, 120s, coll_atom::value, std::move(c))
        .receive([&](collective_result&) {}, [&](caf::error& e) { err = std::move(e); });
    std::printf("rank %u: %s: %s\n", rank, what.c_str(),
                err ? vessel::actors::describe(err).c_str() : "succeeded");
    return err;
  };
  check(!ask(make_call(collective_op::barrier, {}, 0), "warm-up barrier"), "warm-up barrier");
  if (rank == victim) {
    std::fflush(stdout);
    ::kill(::getpid(), SIGKILL);
  }
  collective_call big =
      make_call(collective_op::allreduce, int32s(rank, std::size_t{1} << 16, 3), 0);
  big.timeout = 120s;  // far beyond the reconnect deadline: the dead rank decides, not a timer
  const caf::error e = ask(std::move(big), "allreduce");
  const std::string named = "world rank(s) [" + std::to_string(victim) + "]";
  check(vessel::actors::from_caf_error(e) == make_error_code(errc::rank_failed),
        "allreduce: want rank_failed");
  check(vessel::actors::caf_error_detail(e).find(named) != std::string::npos,
        "allreduce: the detail names " + named);
  collective_call later = make_call(collective_op::barrier, {}, 0);
  later.timeout = 120s;
  const caf::error b = ask(std::move(later), "later barrier");
  check(vessel::actors::from_caf_error(b) == make_error_code(errc::rank_failed),
        "later barrier: want rank_failed");
  const collective_driver_stats ds = driver->stats();
  std::printf("rank %u: driver started %llu, failed %llu, forced waits %llu\n", rank,
              static_cast<unsigned long long>(ds.started),
              static_cast<unsigned long long>(ds.failed),
              static_cast<unsigned long long>(ds.forced));
  self.reset();
  node.stop();
  driver.reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "serve";
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  try {
    vessel::comm world = vessel::comm::init();
    auto made = communicator::create(world.runtime());
    if (!made) {
      std::printf("FAIL communicator: %s\n", made.error().message().c_str());
      return 1;
    }
    const std::uint32_t rank = world.rank();
    int rc = 1;
    if (mode == "serve") rc = serve(world, *made.value());
    if (mode == "rankdeath") rc = rankdeath(world, *made.value());
    if (mode == "latency") rc = latency(world, *made.value());
    made.value().reset();
    if (mode == "rankdeath") {
      world.abort();  // finalize() would wait in a barrier for the dead rank
    } else {
      world.finalize();
    }
    if (rc != 0 || failures != 0) {
      std::printf("FAILED rank %u coll_actor %s: %d failure(s)\n", rank, mode.c_str(), failures);
      return 1;
    }
    std::printf("OK rank %u coll_actor %s\n", rank, mode.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
}
