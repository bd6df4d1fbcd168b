// vessel::node: a world of one (messages to self through the rank actor, typed), a killed rank
// actor restarted by the root supervisor, app actors under supervision, and the link actor path
// (peer events from the reactor through the batcher) over a scripted transport.

#include "actors/node.hpp"

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
#include "io/errc.hpp"
#include "tests/unit/actors/caf_test_support.hpp"
#include "tests/unit/actors/reactor_hold.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;
using testing::waitable_log;

payload text(vessel::node& n, std::string_view s) {
  return payload::copy_of(n.pool(), s).value();
}

envelope receive(caf::scoped_actor& self, const rank_actor& rank, std::uint32_t src,
                 std::uint64_t tag, caf::timespan timeout = std::chrono::seconds{5}) {
  envelope out;
  self->request(rank, caf::infinite, recv_atom::value, src, tag, timeout)
      .receive([&](envelope& e) { out = std::move(e); },
               [&](caf::error& e) { ADD_FAILURE() << describe(e); });
  return out;
}

rank_stats stats_of(caf::scoped_actor& self, const rank_actor& rank) {
  rank_stats out;
  self->request(rank, caf::infinite, stats_atom::value)
      .receive([&](const rank_stats& s) { out = s; },
               [&](caf::error& e) { ADD_FAILURE() << describe(e); });
  return out;
}

void send(caf::scoped_actor& self, const rank_actor& rank, std::uint32_t dst, std::uint64_t tag,
          payload p) {
  self->request(rank, caf::infinite, send_atom::value, dst, tag, std::move(p))
      .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
}

// Fifty messages to self, then received in their order.
void fifty_to_self_in_order(caf::scoped_actor& self, vessel::node& n, const rank_actor& rank) {
  for (int i = 0; i < 50; ++i) send(self, rank, 0, 7, text(n, std::to_string(i)));
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(receive(self, rank, 0, 7).data.view(), std::to_string(i));
  }
}

node_config small_config() {
  node_config cfg;
  cfg.supervision.restart_backoff.initial_delay = 1ms;
  cfg.supervision.restart_backoff.jitter = false;
  cfg.pool.classes = {io::size_class_config{4096, 512}};  // 2 MiB: small and quick to fault in
  return cfg;
}

TEST(node_test, world_of_one_sends_to_itself_through_the_typed_rank_actor) {
  vessel::node n{small_config()};
  {
    caf::scoped_actor self{n.system()};
    rank_actor rank = n.rank_actor();
    ASSERT_TRUE(rank);
    send(self, rank, 0, 5, text(n, "hello"));
    auto got = receive(self, rank, rank_any_source, 5);
    EXPECT_EQ(got.source, 0u);
    EXPECT_EQ(got.tag, 5u);
    EXPECT_EQ(got.data.view(), "hello");

    // Non-overtaking per (source, tag), and a receive by tag skips other tags.
    for (int i = 0; i < 100; ++i) send(self, rank, 0, 7, text(n, std::to_string(i)));
    send(self, rank, 0, 8, text(n, "other"));
    EXPECT_EQ(receive(self, rank, 0, 8).data.view(), "other");
    for (int i = 0; i < 100; ++i) {
      ASSERT_EQ(receive(self, rank, 0, rank_any_tag).data.view(), std::to_string(i));
    }

    // A receive posted before the message arrives is completed by it.
    auto pending = self->request(rank, caf::infinite, recv_atom::value, std::uint32_t{0},
                                 std::uint64_t{9}, caf::timespan{std::chrono::seconds{5}});
    send(self, rank, 0, 9, text(n, "late"));
    pending.receive([](envelope& e) { EXPECT_EQ(e.data.view(), "late"); },
                    [](caf::error& e) { ADD_FAILURE() << describe(e); });

    // Nothing comes: a typed timeout error naming what was awaited.
    self->request(rank, caf::infinite, recv_atom::value, std::uint32_t{0}, std::uint64_t{42},
                  caf::timespan{std::chrono::milliseconds{20}})
        .receive([](envelope&) { ADD_FAILURE() << "a message appeared from nowhere"; },
                 [](caf::error& e) {
                   EXPECT_EQ(from_caf_error(e), make_error_code(actor_errc::receive_timeout));
                   EXPECT_NE(describe(e).find("tag 42"), std::string::npos) << describe(e);
                 });
    // A rank outside the world is refused.
    self->request(rank, caf::infinite, send_atom::value, std::uint32_t{3}, std::uint64_t{1},
                  text(n, "x"))
        .receive([](sent_atom) { ADD_FAILURE() << "sent to a rank that does not exist"; },
                 [](caf::error& e) {
                   EXPECT_EQ(from_caf_error(e), make_error_code(errc::rank_out_of_range));
                 });
    const rank_stats s = stats_of(self, rank);
    EXPECT_EQ(s.sends, 103u);
    EXPECT_EQ(s.received, 103u);
    EXPECT_EQ(s.receive_timeouts, 1u);
    EXPECT_EQ(s.send_errors, 1u);
    EXPECT_GE(s.batches, 1u);
    EXPECT_EQ(s.unexpected, 0u);
    EXPECT_EQ(s.pending_receives, 0u);
  }
  n.stop();
}

// The rank actor keeps one timer, for the earliest deadline: a short receive posted after a long
// one still times out on time, and receives that complete or time out leave the others alone.
TEST(node_test, receive_deadlines_fire_in_their_own_order_whatever_order_they_came_in) {
  vessel::node n{small_config()};
  {
    caf::scoped_actor self{n.system()};
    rank_actor rank = n.rank_actor();
    ASSERT_TRUE(rank);
    auto request = [&](std::uint64_t tag, caf::timespan timeout) {
      return self->request(rank, caf::infinite, recv_atom::value, std::uint32_t{0}, tag, timeout);
    };
    auto long_one = request(50, caf::timespan{10s});
    auto completed = request(52, caf::timespan{5s});
    const auto started = std::chrono::steady_clock::now();
    request(51, caf::timespan{30ms})
        .receive([](envelope&) { ADD_FAILURE() << "a message appeared from nowhere"; },
                 [](caf::error& e) {
                   EXPECT_EQ(from_caf_error(e), make_error_code(actor_errc::receive_timeout));
                   EXPECT_NE(describe(e).find("tag 51"), std::string::npos) << describe(e);
                 });
    const auto waited = std::chrono::steady_clock::now() - started;
    EXPECT_GE(waited, 30ms);
    EXPECT_LT(waited, 5s) << "the short receive waited for a longer one's deadline";
    send(self, rank, 0, 52, text(n, "in time"));
    completed.receive([](envelope& e) { EXPECT_EQ(e.data.view(), "in time"); },
                      [](caf::error& e) { ADD_FAILURE() << describe(e); });
    // Two more short ones, posted in reverse order of their deadlines.
    auto later = request(53, caf::timespan{60ms});
    auto sooner = request(54, caf::timespan{20ms});
    int timed_out = 0;
    for (auto* r : {&sooner, &later}) {
      r->receive([](envelope&) { ADD_FAILURE() << "a message appeared from nowhere"; },
                 [&](caf::error& e) {
                   EXPECT_EQ(from_caf_error(e), make_error_code(actor_errc::receive_timeout));
                   ++timed_out;
                 });
    }
    EXPECT_EQ(timed_out, 2);
    // The first, longest receive is still posted and takes its message.
    send(self, rank, 0, 50, text(n, "still waited for"));
    long_one.receive([](envelope& e) { EXPECT_EQ(e.data.view(), "still waited for"); },
                     [](caf::error& e) { ADD_FAILURE() << describe(e); });
    const rank_stats s = stats_of(self, rank);
    EXPECT_EQ(s.receive_timeouts, 3u);
    EXPECT_EQ(s.received, 2u);
    EXPECT_EQ(s.pending_receives, 0u);
  }
  n.stop();
}

TEST(node_test, the_config_reads_the_caf_thread_count_and_scheduler_from_the_environment) {
  node_config cfg;
  EXPECT_EQ(cfg.scheduler, caf_scheduler::sharing);
  ASSERT_TRUE(cfg.apply_env(
      env_view::from_map({{"VESSEL_CAF_THREADS", "3"}, {"VESSEL_CAF_SCHEDULER", "stealing"}})));
  EXPECT_EQ(cfg.scheduler_threads, 3u);
  EXPECT_EQ(cfg.scheduler, caf_scheduler::stealing);
  ASSERT_TRUE(cfg.apply_env(env_view::from_map({{"VESSEL_CAF_SCHEDULER", "sharing"}})));
  EXPECT_EQ(cfg.scheduler, caf_scheduler::sharing);
  EXPECT_EQ(cfg.scheduler_threads, 3u);  // a variable not set leaves its key alone

  auto bad = cfg.apply_env(env_view::from_map({{"VESSEL_CAF_SCHEDULER", "fifo"}}));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, make_error_code(errc::bad_scheduler_override));
  EXPECT_NE(bad.error().detail.find("VESSEL_CAF_SCHEDULER='fifo'"), std::string::npos)
      << bad.error().detail;
  bad = cfg.apply_env(env_view::from_map({{"VESSEL_CAF_THREADS", "0"}}));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, make_error_code(errc::malformed_number));
  EXPECT_EQ(cfg.scheduler_threads, 3u);  // a refused value changes nothing

  EXPECT_TRUE(cfg.rank_actor_on_reactor);
  ASSERT_TRUE(cfg.apply_env(env_view::from_map({{"VESSEL_RANK_ACTOR_THREAD", "caf"}})));
  EXPECT_FALSE(cfg.rank_actor_on_reactor);
  ASSERT_TRUE(cfg.apply_env(env_view::from_map({{"VESSEL_RANK_ACTOR_THREAD", "reactor"}})));
  EXPECT_TRUE(cfg.rank_actor_on_reactor);
  bad = cfg.apply_env(env_view::from_map({{"VESSEL_RANK_ACTOR_THREAD", "worker"}}));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, make_error_code(errc::bad_scheduler_override));
  EXPECT_NE(bad.error().detail.find("VESSEL_RANK_ACTOR_THREAD='worker'"), std::string::npos)
      << bad.error().detail;
}

// Where the rank actor runs shows when the reactor thread is held up: hosted there, the actor
// answers only once the reactor is free again; on CAF's workers it answers meanwhile.
TEST(node_test, the_rank_actor_runs_on_the_reactor_thread_unless_told_to_run_on_cafs) {
  for (bool on_reactor : {true, false}) {
    SCOPED_TRACE(on_reactor ? "on the reactor" : "on CAF's workers");
    node_config cfg = small_config();
    cfg.rank_actor_on_reactor = on_reactor;
    vessel::node n{cfg};
    {
      caf::scoped_actor self{n.system()};
      rank_actor rank = n.rank_actor();
      ASSERT_TRUE(rank);
      ASSERT_NO_FATAL_FAILURE(fifty_to_self_in_order(self, n, rank));
      testing::reactor_hold hold{n.reactor()};
      self->send(rank, stats_atom::value);
      bool answered = false;
      self->receive([&](const rank_stats&) { answered = true; }, caf::after(100ms) >> [] {});
      EXPECT_EQ(answered, !on_reactor);
      hold.release();
      if (!answered) self->receive([](const rank_stats&) {});
    }
    n.stop();
  }
}

// An app actor on the node's reactor thread (node::reactor_host), as vessel-bench's hosted rows
// run one: its requests to the rank actor are served there, in order; without a host there is none.
using relay_atom = caf::atom_constant<caf::atom("relay")>;

class hosted_app final : public on_reactor_thread<caf::event_based_actor> {
 public:
  hosted_app(caf::actor_config& cfg, reactor_execution_unit* unit, rank_actor rank, vessel::node* n)
      : on_reactor_thread{cfg, unit}, rank_{std::move(rank)}, node_{n} {}

  // (relay_atom, text): sends text to self through the rank actor, receives it back, and answers
  // with what came and whether every step ran on the reactor thread.
  caf::behavior make_behavior() override {
    return {[this](relay_atom, const std::string& text) -> caf::result<std::string, bool> {
      auto answer = make_response_promise<std::string, bool>();
      auto p = payload::copy_of(node_->pool(), text).value();
      bool on_reactor = on_loop();
      request(rank_, caf::infinite, send_atom::value, std::uint32_t{0}, std::uint64_t{9},
              std::move(p))
          .then(
              [=, this](sent_atom) mutable {
                on_reactor = on_reactor && on_loop();
                request(rank_, caf::infinite, recv_atom::value, std::uint32_t{0}, std::uint64_t{9},
                        caf::timespan{std::chrono::seconds{5}})
                    .then(
                        [=, this](const envelope& e) mutable {
                          answer.deliver(std::string{e.data.view()}, on_reactor && on_loop());
                        },
                        [=](caf::error& e) mutable { answer.deliver(std::move(e)); });
              },
              [=](caf::error& e) mutable { answer.deliver(std::move(e)); });
      return answer;
    }};
  }

 private:
  bool on_loop() const { return node_->reactor().is_reactor_thread(); }
  rank_actor rank_;
  vessel::node* node_;
};

TEST(node_test, an_app_actor_hosted_on_the_reactor_talks_to_the_rank_actor_there) {
  vessel::node n{small_config()};
  ASSERT_NE(n.reactor_host(), nullptr);
  {
    caf::scoped_actor self{n.system()};
    auto app = n.system().spawn<hosted_app>(n.reactor_host(), n.rank_actor(), &n);
    for (int i = 0; i < 20; ++i) {
      self->request(app, 10s, relay_atom::value, "m" + std::to_string(i))
          .receive(
              [&](const std::string& text, bool on_reactor) {
                EXPECT_EQ(text, "m" + std::to_string(i));
                EXPECT_TRUE(on_reactor);
              },
              [](caf::error& e) { ADD_FAILURE() << describe(e); });
    }
    testing::kill_and_wait(self, app);
  }
  n.stop();

  node_config on_caf = small_config();
  on_caf.rank_actor_on_reactor = false;
  vessel::node m{on_caf};
  EXPECT_EQ(m.reactor_host(), nullptr);
  m.stop();
}

TEST(node_test, the_rank_actor_works_under_either_caf_scheduler) {
  for (caf_scheduler policy : {caf_scheduler::sharing, caf_scheduler::stealing}) {
    node_config cfg = small_config();
    cfg.scheduler = policy;
    vessel::node n{cfg};
    {
      caf::scoped_actor self{n.system()};
      rank_actor rank = n.rank_actor();
      ASSERT_TRUE(rank);
      ASSERT_NO_FATAL_FAILURE(fifty_to_self_in_order(self, n, rank));
    }
    n.stop();
  }
}

TEST(node_test, a_killed_rank_actor_is_restarted_and_works) {
  vessel::node n{small_config()};
  {
    caf::scoped_actor self{n.system()};
    auto first = n.rank_actor();
    ASSERT_TRUE(first);
    // An arrival before the kill: the reactor thread's copy of the rank slot names `first` now,
    // and must move to its successor (the generation) rather than hand arrivals to a dead entry.
    send(self, first, 0, 1, text(n, "before"));
    EXPECT_EQ(receive(self, first, 0, 1).data.view(), "before");
    self->send_exit(first, caf::exit_reason::kill);
    rank_actor second;
    for (int i = 0; i < 5000; ++i) {
      second = n.rank_actor();
      if (second && second.address() != first.address()) break;
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_TRUE(second);
    ASSERT_NE(second.address(), first.address());
    send(self, second, 0, 1, text(n, "after restart"));
    EXPECT_EQ(receive(self, second, 0, 1).data.view(), "after restart");
  }
  n.stop();
  EXPECT_FALSE(n.failed());
}

// A receive request waiting in the rank actor when the node stops is answered (CAF 0.17 would
// drop its promise without a word, and a requester without a timeout would wait forever).
TEST(node_test, a_receive_request_still_waiting_when_the_node_stops_is_answered) {
  vessel::node n{small_config()};
  std::promise<caf::error> answered;
  std::thread requester{[&] {
    caf::scoped_actor self{n.system()};
    self->request(n.rank_actor(), caf::infinite, recv_atom::value, std::uint32_t{0},
                  std::uint64_t{77}, caf::timespan{std::chrono::minutes{1}})
        .receive([&](envelope&) { answered.set_value(caf::error{}); },
                 [&](caf::error& e) { answered.set_value(std::move(e)); });
  }};
  auto done = answered.get_future();
  // Waiting in the rank actor before the stop.
  for (int i = 0; i < 5000; ++i) {
    caf::scoped_actor self{n.system()};
    if (stats_of(self, n.rank_actor()).pending_receives == 1) break;
    std::this_thread::sleep_for(1ms);
  }
  n.stop();
  ASSERT_EQ(done.wait_for(std::chrono::seconds{10}), std::future_status::ready);
  const caf::error e = done.get();
  EXPECT_EQ(from_caf_error(e), make_error_code(actor_errc::node_stopped)) << describe(e);
  requester.join();
}

using crash_atom = caf::atom_constant<caf::atom("crash")>;

caf::behavior app_actor(caf::event_based_actor*, std::shared_ptr<waitable_log<int>> starts) {
  starts->push(1);
  return {[](crash_atom) -> void { throw std::runtime_error("app bug"); }};
}

TEST(node_test, app_actors_run_under_supervision_and_stop_with_the_node) {
  auto starts = std::make_shared<waitable_log<int>>();
  vessel::node n{small_config()};
  auto app = n.spawn_supervised(make_child("app", app_actor, starts));
  ASSERT_TRUE(app) << app.error().message();
  caf::anon_send(app.value(), crash_atom::value);
  ASSERT_TRUE(starts->wait_until([](const auto& s) { return s.size() == 2; }));
  n.stop();
  EXPECT_FALSE(n.failed());
}

// A transport whose peer events the test plays on the reactor thread.
class scripted_transport final : public node_transport {
 public:
  explicit scripted_transport(mesh_observer& o) : observer{o} {}
  result<void> send(std::uint32_t, std::uint64_t, io::buffer_slice) override {
    return outcome::success();
  }
  void release(std::uint32_t, std::size_t) override {}
  void drop_connection(std::uint32_t peer) override {
    observer.on_peer_state(peer, peer_state::reconnecting,
                           make_error_code(io::errc::connection_reset));
    observer.on_peer_state(peer, peer_state::up, {});
  }
  mesh_observer& observer;
};

caf::behavior listener(caf::event_based_actor*, std::shared_ptr<waitable_log<link_event>> log) {
  return {[log](const link_event& e) { log->push(e); }};
}

TEST(node_test, a_link_actor_sees_up_reconnecting_up_around_a_dropped_connection) {
  auto cfg = small_config();
  cfg.world_size = 2;
  scripted_transport* transport = nullptr;
  vessel::node n{cfg, [&](io::reactor&, mesh_observer& o) {
                   auto t = std::make_unique<scripted_transport>(o);
                   transport = t.get();
                   return t;
                 }};
  auto events = std::make_shared<waitable_log<link_event>>();
  link_actor link;
  for (int i = 0; i < 5000 && !link; ++i) {
    link = n.link_actor(1);
    if (!link) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(link);
  EXPECT_FALSE(n.link_actor(0));  // no link to self
  {
    caf::scoped_actor self{n.system()};
    auto l = caf::actor_cast<link_listener>(n.system().spawn(listener, events));
    self->send(link, listen_atom::value, l);
    // Make sure the listener is registered before events flow.
    self->request(link, caf::infinite, status_atom::value)
        .receive([](const link_status&) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    std::promise<void> done;
    ASSERT_TRUE(n.reactor().post([&] {
      transport->observer.on_peer_state(1, peer_state::up, {});
      transport->drop_connection(1);
      done.set_value();
    }));
    done.get_future().wait();
    ASSERT_TRUE(events->wait_until([](const auto& es) { return es.size() == 3; }));
    const auto es = events->snapshot();
    EXPECT_EQ(es[0].state, peer_state::up);
    EXPECT_EQ(es[1].state, peer_state::reconnecting);
    EXPECT_EQ(es[1].why, make_error_code(io::errc::connection_reset));
    EXPECT_EQ(es[2].state, peer_state::up);
    self->request(link, caf::infinite, status_atom::value)
        .receive(
            [](const link_status& s) {
              EXPECT_EQ(s.peer, 1u);
              EXPECT_EQ(s.state, peer_state::up);
              EXPECT_EQ(s.ups, 2u);
              EXPECT_EQ(s.reconnects, 1u);
              EXPECT_EQ(s.last_reason, make_error_code(io::errc::connection_reset));
            },
            [](caf::error& e) { ADD_FAILURE() << describe(e); });
    self->send_exit(l, caf::exit_reason::user_shutdown);
  }
  n.stop();
  EXPECT_TRUE(n.lost_peers().empty());
}

}  // namespace
}  // namespace vessel::actors
