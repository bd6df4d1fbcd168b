// actors::driving_scoped_actor: a scoped actor whose waits run the node's loop. Its replies from
// the rank actor come on the waiting thread (no sleep), in order; a reply from off the loop
// wakes it once the spin is spent; timeouts still fire; two waiting threads share one loop; with
// caller progress off it sleeps as a caf::scoped_actor does; between two nodes over a real mesh
// a ping-pong keeps its order across a cut connection.

#include "actors/driving_scoped_actor.hpp"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <caf/all.hpp>

#include "actors/actor_errc.hpp"
#include "actors/errc.hpp"
#include "actors/mesh.hpp"
#include "actors/node.hpp"
#include "tests/unit/actors/mesh_test_support.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

node_config one_rank(bool caller_progress = true,
                     std::chrono::microseconds spin = std::chrono::seconds{10}) {
  node_config cfg;
  cfg.pool.classes = {io::size_class_config{4096, 512}};
  cfg.pool.populate = false;
  cfg.caller_progress.enabled = caller_progress;
  cfg.caller_progress.spin = spin;  // long: a wait the loop answers never sleeps, however slow
  return cfg;
}

void send(driving_scoped_actor& self, const rank_actor& rank, std::uint32_t dst, std::uint64_t tag,
          payload p) {
  self->request(rank, caf::infinite, send_atom::value, dst, tag, std::move(p))
      .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
}

std::string receive(driving_scoped_actor& self, const rank_actor& rank, std::uint32_t src,
                    std::uint64_t tag) {
  std::string out;
  self->request(rank, caf::infinite, recv_atom::value, src, tag, caf::timespan{10s})
      .receive([&](const envelope& e) { out = std::string{e.data.view()}; },
               [](caf::error& e) { ADD_FAILURE() << describe(e); });
  return out;
}

// Sends `count` messages to self on `tag` and receives each before the next.
void ping_self(driving_scoped_actor& self, vessel::node& n, std::uint64_t tag, int count) {
  const rank_actor rank = n.rank_actor();
  for (int i = 0; i < count; ++i) {
    const std::string text = std::to_string(tag) + "/" + std::to_string(i);
    send(self, rank, 0, tag, payload::copy_of(n.pool(), text).value());
    ASSERT_EQ(receive(self, rank, 0, tag), text);
  }
}

TEST(driving_scoped_actor_test, replies_from_the_rank_actor_come_while_the_waiter_drives) {
  vessel::node n{one_rank()};
  ASSERT_TRUE(n.reactor().lending_allowed());
  {
    driving_scoped_actor self{n};
    ping_self(self, n, 3, 200);
    // A receive posted before its message still completes, and order per tag holds.
    for (int i = 0; i < 20; ++i) {
      send(self, n.rank_actor(), 0, 4, payload::copy_of(n.pool(), std::to_string(i)).value());
    }
    for (int i = 0; i < 20; ++i) EXPECT_EQ(receive(self, n.rank_actor(), 0, 4), std::to_string(i));
    // A reply that cannot be here yet: its message comes from another thread 20 ms later, so
    // this wait drives the loop (which runs that thread's request too) until it comes.
    const std::uint64_t driven_before = self.driven_waits();
    std::thread later{[&n] {
      std::this_thread::sleep_for(20ms);
      caf::scoped_actor other{n.system()};
      other->request(n.rank_actor(), caf::infinite, send_atom::value, std::uint32_t{0},
                     std::uint64_t{5}, payload::copy_of(n.pool(), "late").value())
          .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    }};
    EXPECT_EQ(receive(self, n.rank_actor(), 0, 5), "late");
    later.join();
    EXPECT_GT(self.driven_waits(), driven_before);
    // Every wait either found its reply there (the reactor thread ran the request before this
    // thread looked) or drove the loop until it came: none slept.
    EXPECT_EQ(self.sleeping_waits(), 0u);
  }
  n.stop();
}

TEST(driving_scoped_actor_test, with_caller_progress_off_it_sleeps_as_a_scoped_actor_does) {
  vessel::node n{one_rank(/*caller_progress=*/false)};
  EXPECT_FALSE(n.reactor().lending_allowed());
  {
    driving_scoped_actor self{n};
    ping_self(self, n, 3, 50);
    // The calls cannot take the loop either: they go as the requests.
    ASSERT_FALSE(self.send(n.rank_actor(), 0, 4, payload::copy_of(n.pool(), "r").value()));
    auto got = self.receive(n.rank_actor(), 0, 4, caf::timespan{5s});
    ASSERT_TRUE(got) << describe(got.error());
    EXPECT_EQ(got->data.view(), "r");
    EXPECT_EQ(self.driven_waits(), 0u);  // a reply already there is not a sleep: none counted
    EXPECT_EQ(self.direct_sends(), 0u);
    EXPECT_EQ(self.direct_receives(), 0u);
  }
  n.stop();
}

// An actor on CAF's workers answers after 50 ms: the waiter drives for its spin (1 ms), hands the
// loop back and sleeps, and the reply wakes it. A request nobody answers times out on time.
TEST(driving_scoped_actor_test, a_reply_from_off_the_loop_wakes_it_once_the_spin_is_spent) {
  vessel::node n{one_rank(true, 1ms)};
  {
    // (Function actors with arguments: CAF 0.17's factory for one without dereferences a null
    // tuple pointer, which UBSan stops at.)
    auto slow = n.system().spawn(
        [](caf::event_based_actor*, std::chrono::milliseconds delay) -> caf::behavior {
          return {[delay](int x) {
            std::this_thread::sleep_for(delay);  // a CAF worker's thread, not the loop
            return x + 1;
          }};
        },
        50ms);
    // Keeps every promise and never delivers one.
    auto mute = n.system().spawn(
        [](caf::event_based_actor* self,
           std::shared_ptr<std::vector<caf::response_promise>> kept) -> caf::behavior {
          return {[self, kept](int) -> caf::result<int> {
            kept->push_back(self->make_response_promise());
            return caf::delegated<int>{};
          }};
        },
        std::make_shared<std::vector<caf::response_promise>>());
    driving_scoped_actor self{n};
    const auto t0 = std::chrono::steady_clock::now();
    self->request(slow, caf::infinite, 41)
        .receive([](int v) { EXPECT_EQ(v, 42); },
                 [](caf::error& e) { ADD_FAILURE() << describe(e); });
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
    EXPECT_GE(self.sleeping_waits(), 1u);

    const auto t1 = std::chrono::steady_clock::now();
    bool timed_out = false;
    self->request(mute, 30ms, 1)
        .receive([](int) { ADD_FAILURE() << "an answer from an actor that never answers"; },
                 [&](caf::error& e) { timed_out = e == caf::sec::request_timeout; });
    EXPECT_TRUE(timed_out);
    const auto waited = std::chrono::steady_clock::now() - t1;
    EXPECT_GE(waited, 30ms);
    EXPECT_LT(waited, 5s);
    // The loop was handed back in between: the rank actor still answers.
    ping_self(self, n, 9, 10);
    self->send_exit(slow, caf::exit_reason::user_shutdown);
    self->send_exit(mute, caf::exit_reason::user_shutdown);
  }
  n.stop();
}

// Two threads wait at once: one drives, the other finds the loop taken and sleeps until the
// driver's turns deliver its reply (or drives itself later). Both see all of theirs, in order.
// How each wait went is the scheduler's choice (on a loaded machine the reactor thread may have
// answered every request before it is awaited), so only the replies are checked.
TEST(driving_scoped_actor_test, two_waiting_threads_share_the_loop) {
  vessel::node n{one_rank(true, 200us)};
  std::vector<std::thread> threads;
  for (std::uint64_t tag : {11u, 12u}) {
    threads.emplace_back([&n, tag] {
      driving_scoped_actor self{n};
      ping_self(self, n, tag, 300);
    });
  }
  for (auto& t : threads) t.join();
  n.stop();
}

// send() and receive() go as calls into the rank actor: what is here is taken at once, a receive
// that must wait completes when its message comes (from another thread here), and order per
// (source, tag) holds across both kinds.
TEST(driving_scoped_actor_test, sends_and_receives_go_as_calls_into_the_rank_actor) {
  vessel::node n{one_rank()};
  {
    driving_scoped_actor self{n};
    const rank_actor rank = n.rank_actor();
    // Until the rank actor has run once its direct entry takes nothing (a loaded machine starts
    // it late): one request first.
    self->request(rank, caf::infinite, stats_atom::value)
        .receive([](const rank_stats&) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    for (int i = 0; i < 100; ++i) {
      ASSERT_FALSE(self.send(rank, 0, 7, payload::copy_of(n.pool(), std::to_string(i)).value()));
    }
    for (int i = 0; i < 100; ++i) {
      auto got = self.receive(rank, 0, rank_any_tag, caf::timespan{5s});
      ASSERT_TRUE(got) << describe(got.error());
      ASSERT_EQ(got->data.view(), std::to_string(i));
      EXPECT_EQ(got->source, 0u);
      EXPECT_EQ(got->tag, 7u);
    }
    EXPECT_EQ(self.direct_sends(), 100u);
    EXPECT_EQ(self.direct_receives(), 100u);

    std::thread later{[&n] {
      std::this_thread::sleep_for(30ms);
      driving_scoped_actor other{n};
      ASSERT_FALSE(other.send(n.rank_actor(), 0, 8, payload::copy_of(n.pool(), "late").value()));
    }};
    auto got = self.receive(rank, rank_any_source, 8, caf::timespan{10s});
    later.join();
    ASSERT_TRUE(got) << describe(got.error());
    EXPECT_EQ(got->data.view(), "late");
    EXPECT_EQ(self.direct_receives(), 101u);

    // The rank actor's answers that are errors come back as they would to the requests.
    const auto t0 = std::chrono::steady_clock::now();
    auto none = self.receive(rank, 0, 42, caf::timespan{30ms});
    ASSERT_FALSE(none);
    EXPECT_EQ(from_caf_error(none.error()), make_error_code(actor_errc::receive_timeout));
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
    auto refused = self.send(rank, 5, 1, payload::copy_of(n.pool(), "x").value());
    EXPECT_EQ(from_caf_error(refused), make_error_code(errc::rank_out_of_range));
  }
  n.stop();
}

// A receive waiting in the rank actor when the node stops ends with an error, not a hang.
TEST(driving_scoped_actor_test, a_waiting_receive_ends_when_the_node_stops) {
  vessel::node n{one_rank(true, 1ms)};
  std::promise<caf::error> ended;
  std::thread waiter{[&] {
    driving_scoped_actor self{n};
    auto got = self.receive(n.rank_actor(), 0, 1, caf::timespan{60s});
    ended.set_value(got ? caf::error{} : got.error());
  }};
  std::this_thread::sleep_for(50ms);
  const auto t0 = std::chrono::steady_clock::now();
  n.stop();
  auto done = ended.get_future();
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready);
  const caf::error e = done.get();
  EXPECT_EQ(from_caf_error(e), make_error_code(actor_errc::node_stopped)) << describe(e);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  waiter.join();
}

std::unique_ptr<vessel::node> mesh_node(std::uint32_t rank, const cluster_token& token,
                                        mesh*& out) {
  node_config cfg = one_rank(true, 200us);
  cfg.rank = rank;
  cfg.world_size = 2;
  const mesh_config m =
      test::base_config(rank, 2, token, mesh_transport::tcp, "driving_scoped_actor_test");
  return std::make_unique<vessel::node>(cfg, [&, m](io::reactor& r, mesh_observer& o) {
    auto t = std::make_unique<mesh_node_transport<mesh>>(std::make_unique<mesh>(r, m, o));
    out = &t->mesh();
    return t;
  });
}

// A ping-pong between two nodes' driving actors over loopback TCP, one side with requests, the
// other with the calls, the connection cut from outside halfway: every message arrives once, in
// order.
TEST(driving_scoped_actor_test, a_ping_pong_between_two_nodes_survives_a_cut_connection) {
  test::store_fixture store;
  const auto token = test::make_token('d');
  mesh* meshes[2] = {nullptr, nullptr};
  auto n0 = mesh_node(0, token, meshes[0]);
  auto n1 = mesh_node(1, token, meshes[1]);
  ASSERT_TRUE(meshes[0] && meshes[1]);
  ASSERT_TRUE(test::connect_meshes(store, {meshes[0], meshes[1]}));

  constexpr int rounds = 400;
  std::thread echo{[&] {
    driving_scoped_actor self{*n1};
    const rank_actor rank = n1->rank_actor();
    for (int i = 0; i < rounds; ++i) {  // the calls here, the requests on the other side
      auto got = self.receive(rank, 0, 5, caf::timespan{20s});
      ASSERT_TRUE(got) << describe(got.error());
      ASSERT_EQ(got->data.view(), "ping " + std::to_string(i));
      auto sent =
          self.send(rank, 0, 6, payload::copy_of(n1->pool(), "pong " + std::to_string(i)).value());
      ASSERT_FALSE(sent) << describe(sent);
    }
    EXPECT_GT(self.direct_receives(), 0u);
  }};
  {
    driving_scoped_actor self{*n0};
    const rank_actor rank = n0->rank_actor();
    for (int i = 0; i < rounds; ++i) {
      if (i == rounds / 2) n0->drop_connection(1);
      send(self, rank, 1, 5, payload::copy_of(n0->pool(), "ping " + std::to_string(i)).value());
      ASSERT_EQ(receive(self, rank, 1, 6), "pong " + std::to_string(i));
    }
    EXPECT_GT(self.driven_waits(), 0u);
  }
  echo.join();
  // The cut was real: a link re-dialled.
  auto reconnects = [](vessel::node& n, mesh& m, std::uint32_t peer) {
    std::promise<std::uint64_t> seen;
    auto got = seen.get_future();
    n.reactor().post([&] { seen.set_value(m.stats(peer).reconnects); });
    return got.get();
  };
  EXPECT_GE(reconnects(*n0, *meshes[0], 1) + reconnects(*n1, *meshes[1], 0), 1u);
  n1->stop();
  n0->stop();
  EXPECT_FALSE(n0->failed());
  EXPECT_FALSE(n1->failed());
}

TEST(driving_scoped_actor_test, the_node_config_reads_caller_progress_from_the_environment) {
  node_config cfg;
  EXPECT_TRUE(cfg.caller_progress.enabled);
  ASSERT_TRUE(cfg.apply_env(env_view::from_map({{"VESSEL_PROGRESS", "thread"},
                                                {"VESSEL_PROGRESS_SPIN_US", "50"},
                                                {"VESSEL_YIELD_WHEN_IDLE", "1"}})));
  EXPECT_FALSE(cfg.caller_progress.enabled);
  EXPECT_EQ(cfg.caller_progress.spin, 50us);
  EXPECT_EQ(cfg.caller_progress.yield_when_idle, true);
  ASSERT_TRUE(cfg.apply_env(env_view::from_map({{"VESSEL_PROGRESS", "caller"}})));
  EXPECT_TRUE(cfg.caller_progress.enabled);
  auto bad = cfg.apply_env(env_view::from_map({{"VESSEL_PROGRESS", "sometimes"}}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().detail.find("VESSEL_PROGRESS='sometimes'"), std::string::npos);
  bad = cfg.apply_env(env_view::from_map({{"VESSEL_YIELD_WHEN_IDLE", "yes"}}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().detail.find("VESSEL_YIELD_WHEN_IDLE='yes'"), std::string::npos);
}

}  // namespace
}  // namespace vessel::actors
