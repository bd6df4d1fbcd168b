// The collective actor (collectives/collective_actor.hpp) and its driver on a world of one: every
// operation answers what the blocking communicator gives, many requests in flight are each
// answered with their own result, bad calls and failing collectives are answered with their
// typed error while the actor keeps serving, and the node's supervisor restarts it.

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/actor_errc.hpp"
#include "actors/comm.hpp"
#include "actors/env.hpp"
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

bytes int32s(std::int32_t first, std::size_t n) {
  bytes b(n * sizeof(std::int32_t));
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t v = first + static_cast<std::int32_t>(i);
    std::memcpy(b.data() + i * sizeof v, &v, sizeof v);
  }
  return b;
}

vessel::node_config small_node() {
  vessel::node_config cfg;
  cfg.supervision.restart_backoff.initial_delay = 1ms;
  cfg.supervision.restart_backoff.jitter = false;
  cfg.pool.classes = {vessel::io::size_class_config{4096, 64}};
  return cfg;
}

collective_call call_of(collective_op op, bytes input) {
  collective_call c;
  c.op = op;
  c.type = dtype::int32;
  c.reduction = reduce_op::sum;
  c.input = std::move(input);
  return c;
}

// No launcher variables (a world of one), but VESSEL_PROGRESS as the process has it, so that
// both progress modes of the runtime can be run.
vessel::actors::env_view single_process_env() {
  std::map<std::string, std::string, std::less<>> vars;
  if (auto p = vessel::actors::env_view::process().get("VESSEL_PROGRESS")) {
    vars["VESSEL_PROGRESS"] = *p;
  }
  return vessel::actors::env_view::from_map(std::move(vars));
}

// A world of one: comm's runtime, the world communicator, its driver, a node for the actors.
struct world_of_one {
  vessel::comm world = vessel::comm::init(single_process_env());
  std::unique_ptr<communicator> comm;
  std::shared_ptr<collective_driver> driver;
  std::unique_ptr<vessel::node> node;

  world_of_one() {
    auto made = communicator::create(world.runtime());
    EXPECT_TRUE(made) << made.error().message();
    if (made) comm = std::move(made).value();
  }
  void start_driver() {
    driver = std::make_shared<collective_driver>(*comm, world.runtime());
    node = std::make_unique<vessel::node>(small_node());
  }
  ~world_of_one() {
    if (node) node->stop();
    node.reset();
    driver.reset();  // before the communicator it drives
    comm.reset();
  }
};

// The blocking communicator's output for `c` (before the driver owns the communicator).
bytes blocking_output(communicator& comm, const collective_call& c) {
  auto n = collective_driver::output_bytes(c, comm.size());
  EXPECT_TRUE(n);
  bytes out(n.value());
  const vessel::result<void> r = test_support::run_blocking(comm, c, out);
  EXPECT_TRUE(r) << r.error().message();
  return out;
}

// Asks `coll` for `c` and waits for the answer (a result or an error).
struct answer {
  bool ok = false;
  bytes output;
  caf::error error;
};
answer ask(caf::scoped_actor& self, const collective_actor& coll, collective_call c) {
  answer a;
  self->request(coll, 30s, coll_atom::value, std::move(c))
      .receive(
          [&](collective_result& r) {
            a.ok = true;
            a.output = std::move(r.output);
          },
          [&](caf::error& e) { a.error = std::move(e); });
  return a;
}

TEST(collective_actor_test, every_operation_answers_what_the_blocking_communicator_gives) {
  world_of_one w;
  ASSERT_TRUE(w.comm);
  std::vector<collective_call> calls;
  for (collective_op op : all_collective_ops) {
    calls.push_back(call_of(op, op == collective_op::barrier ? bytes{} : int32s(100, 37)));
  }
  std::vector<bytes> expected;
  for (const auto& c : calls) expected.push_back(blocking_output(*w.comm, c));
  w.start_driver();
  auto coll = w.node->spawn_supervised(collective_actor_child("collectives", w.driver));
  ASSERT_TRUE(coll) << coll.error().message();
  const auto handle = caf::actor_cast<collective_actor>(coll.value());
  caf::scoped_actor self{w.node->system()};
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const answer a = ask(self, handle, calls[i]);
    ASSERT_TRUE(a.ok) << to_string(calls[i].op) << ": " << vessel::actors::describe(a.error);
    EXPECT_EQ(a.output, expected[i]) << to_string(calls[i].op);
    if (calls[i].op != collective_op::barrier) {
      EXPECT_EQ(a.output.size(), calls[i].input.size()) << "a world of one returns its input";
    }
  }
}

TEST(collective_actor_test, many_requests_in_flight_are_each_answered_with_their_own_result) {
  world_of_one w;
  ASSERT_TRUE(w.comm);
  w.start_driver();
  auto coll = w.node->spawn_supervised(collective_actor_child("collectives", w.driver));
  ASSERT_TRUE(coll) << coll.error().message();
  const auto handle = caf::actor_cast<collective_actor>(coll.value());
  caf::scoped_actor self{w.node->system()};
  // All sent before any answer is read: the actor takes them all while the driver runs them.
  constexpr int requests = 48;
  using handle_t = decltype(self->request(handle, 30s, coll_atom::value, collective_call{}));
  std::vector<handle_t> sent;
  for (int i = 0; i < requests; ++i) {
    const auto op = i % 3 == 0 ? collective_op::allgather : collective_op::allreduce;
    sent.push_back(
        self->request(handle, 30s, coll_atom::value, call_of(op, int32s(i * 1000, 1 + i))));
  }
  int answered = 0;
  for (int i = requests - 1; i >= 0; --i) {  // read in reverse: matching, not ordering
    sent[i].receive(
        [&](collective_result& r) {
          EXPECT_EQ(r.output, int32s(i * 1000, 1 + i)) << "request " << i;
          ++answered;
        },
        [&](caf::error& e) {
          ADD_FAILURE() << "request " << i << ": " << vessel::actors::describe(e);
        });
  }
  EXPECT_EQ(answered, requests);
  collective_actor_stats st;
  self->request(handle, 30s, vessel::actors::stats_atom::value)
      .receive([&](collective_actor_stats& s) { st = s; },
               [&](caf::error& e) { ADD_FAILURE() << vessel::actors::describe(e); });
  EXPECT_EQ(st.requests, std::uint64_t{requests});
  EXPECT_EQ(st.answered, std::uint64_t{requests});
  EXPECT_EQ(st.pending, 0u);
  EXPECT_EQ(st.driver.started, std::uint64_t{requests});
  EXPECT_EQ(st.driver.succeeded, std::uint64_t{requests});
}

TEST(collective_actor_test, bad_calls_are_answered_with_their_error_and_the_actor_keeps_serving) {
  world_of_one w;
  ASSERT_TRUE(w.comm);
  w.start_driver();
  auto coll = w.node->spawn_supervised(collective_actor_child("collectives", w.driver));
  ASSERT_TRUE(coll) << coll.error().message();
  const auto handle = caf::actor_cast<collective_actor>(coll.value());
  caf::scoped_actor self{w.node->system()};

  collective_call ragged = call_of(collective_op::allreduce, bytes(6));  // 1.5 int32
  answer a = ask(self, handle, ragged);
  ASSERT_FALSE(a.ok);
  EXPECT_EQ(vessel::actors::from_caf_error(a.error), make_error_code(errc::size_mismatch))
      << vessel::actors::describe(a.error);
  EXPECT_NE(vessel::actors::caf_error_detail(a.error).find("bad call"), std::string::npos);

  collective_call bitwise_float = call_of(collective_op::allreduce, bytes(16));
  bitwise_float.type = dtype::float32;
  bitwise_float.reduction = reduce_op::band;
  a = ask(self, handle, bitwise_float);
  ASSERT_FALSE(a.ok);
  EXPECT_EQ(vessel::actors::from_caf_error(a.error), make_error_code(errc::unsupported_op))
      << vessel::actors::describe(a.error);

  collective_call unknown = call_of(collective_op::allreduce, int32s(1, 4));
  unknown.algorithm = "no_such_algorithm";
  a = ask(self, handle, unknown);
  ASSERT_FALSE(a.ok);
  EXPECT_EQ(vessel::actors::from_caf_error(a.error), make_error_code(errc::unknown_algorithm))
      << vessel::actors::describe(a.error);

  a = ask(self, handle, call_of(collective_op::allreduce, int32s(5, 9)));
  ASSERT_TRUE(a.ok) << vessel::actors::describe(a.error);
  EXPECT_EQ(a.output, int32s(5, 9));
}

TEST(collective_actor_test, the_node_restarts_it_over_the_same_driver) {
  world_of_one w;
  ASSERT_TRUE(w.comm);
  w.start_driver();
  auto coll = w.node->spawn_supervised(collective_actor_child("collectives", w.driver));
  ASSERT_TRUE(coll) << coll.error().message();
  const caf::actor first = coll.value();
  caf::anon_send_exit(first, caf::exit_reason::kill);
  caf::scoped_actor self{w.node->system()};
  // Ask the root for the child until it is a new incarnation (restarted after its backoff).
  caf::actor second;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    self->request(w.node->root(), 5s, vessel::actors::child_atom::value, std::string{"collectives"})
        .receive([&](caf::actor& a) { second = a; }, [&](caf::error&) {});
    if (second && second.address() != first.address()) break;
    second = nullptr;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(second) << "the collective actor was not restarted";
  const answer a = ask(self, caf::actor_cast<collective_actor>(second),
                       call_of(collective_op::allgather, int32s(-3, 11)));
  ASSERT_TRUE(a.ok) << vessel::actors::describe(a.error);
  EXPECT_EQ(a.output, int32s(-3, 11));
  EXPECT_FALSE(w.node->failed());
}

// The driver alone, without CAF: completions run once each, with the right output, from many
// submitting threads at once.
TEST(collective_driver_test, jobs_from_many_threads_complete_once_each) {
  world_of_one w;
  ASSERT_TRUE(w.comm);
  collective_driver driver{*w.comm, w.world.runtime()};
  std::mutex m;
  std::condition_variable cv;
  std::map<int, bytes> outputs;
  int errors = 0;
  constexpr int threads = 4, per_thread = 16;
  std::vector<std::thread> submitters;
  for (int t = 0; t < threads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const int key = t * per_thread + i;
        driver.submit(call_of(collective_op::allreduce, int32s(key, 3)),
                      [&, key](collective_outcome o) {
                        std::lock_guard lock{m};
                        if (o.error) ++errors;
                        EXPECT_TRUE(outputs.emplace(key, std::move(o.output)).second) << key;
                        cv.notify_all();
                      });
      }
    });
  }
  for (auto& t : submitters) t.join();
  std::unique_lock lock{m};
  ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return outputs.size() == threads * per_thread; }));
  EXPECT_EQ(errors, 0);
  for (const auto& [key, out] : outputs) EXPECT_EQ(out, int32s(key, 3)) << key;
}

}  // namespace
