// The supervisor: restart order and backoff, escalation with the child's name and reasons,
// orderly shutdown in reverse order without leaving an actor running, nested supervisors.

#include "actors/supervisor.hpp"

#include <memory>
#include <stdexcept>
#include <string>

#include <caf/all.hpp>
#include <gtest/gtest.h>

#include "tests/unit/actors/caf_test_support.hpp"

namespace vessel::actors {
namespace {

using testing::caf_test;
using testing::waitable_log;
using namespace std::chrono_literals;

using crash_atom = caf::atom_constant<caf::atom("crash")>;
using echo_atom = caf::atom_constant<caf::atom("echo")>;

using name_log = waitable_log<std::string>;
using event_log = waitable_log<supervisor_event>;

// A worker that records its end, throws on crash_atom and answers echo_atom.
caf::behavior worker(caf::event_based_actor* self, std::shared_ptr<name_log> ended,
                     std::string name) {
  self->attach_functor([ended, name](const caf::error&) { ended->push(name); });
  return {
      [](crash_atom, const std::string& what) -> void { throw std::runtime_error(what); },
      [](echo_atom, std::int32_t x) { return x; },
  };
}

// A worker that crashes as soon as it starts.
caf::behavior crash_on_start(caf::event_based_actor* self, std::string what) {
  self->send(self, crash_atom::value, what);
  return {[](crash_atom, const std::string& w) -> void { throw std::runtime_error(w); }};
}

supervisor_config fast_config(std::string name, std::shared_ptr<event_log> events,
                              std::uint32_t max_restarts = 5) {
  supervisor_config cfg;
  cfg.name = std::move(name);
  cfg.restart_backoff.initial_delay = 1ms;
  cfg.restart_backoff.max_delay = 1s;
  cfg.restart_backoff.jitter = false;
  cfg.max_restarts = max_restarts;
  cfg.window = 60s;
  cfg.observer = [events](const supervisor_event& e) { events->push(e); };
  return cfg;
}

std::size_t count(const std::vector<supervisor_event>& events, supervisor_event::kind what,
                  const std::string& child) {
  std::size_t n = 0;
  for (const auto& e : events) n += e.what == what && e.child == child ? 1 : 0;
  return n;
}

// The current handle of `name`, waiting while the child is between incarnations.
caf::actor child_of(caf::scoped_actor& self, const caf::actor& sup, const std::string& name) {
  for (int i = 0; i < 1000; ++i) {
    caf::actor found;
    self->request(sup, caf::infinite, child_atom::value, name)
        .receive([&](caf::actor& a) { found = std::move(a); },
                 [&](caf::error& e) { ADD_FAILURE() << describe(e); });
    if (found) return found;
    std::this_thread::sleep_for(1ms);
  }
  return {};
}

caf::error await_down(caf::scoped_actor& self, const caf::actor& who) {
  caf::error reason;
  bool seen = false;
  self->receive([&](caf::down_msg& dm) { reason = dm.reason; seen = dm.source == who.address(); },
                caf::after(std::chrono::seconds{10}) >> [] {});
  EXPECT_TRUE(seen) << "no down message within 10 s";
  return reason;
}

class supervisor_test : public caf_test {};

TEST_F(supervisor_test, restarts_a_crashing_child_with_growing_backoff_and_keeps_the_text) {
  auto events = std::make_shared<event_log>();
  auto ended = std::make_shared<name_log>();
  auto sup = spawn_supervisor(sys(), fast_config("root", events),
                              {make_child("w", worker, ended, std::string{"w"})});
  caf::scoped_actor self{sys()};
  for (int i = 1; i <= 3; ++i) {
    auto w = child_of(self, sup, "w");
    ASSERT_TRUE(w);
    self->send(w, crash_atom::value, "boom " + std::to_string(i));
    ASSERT_TRUE(events->wait_until([&](const auto& es) {
      return count(es, supervisor_event::kind::started, "w") == static_cast<std::size_t>(i) + 1;
    }));
  }
  // The restarted child works.
  auto w = child_of(self, sup, "w");
  self->request(w, caf::infinite, echo_atom::value, std::int32_t{7})
      .receive([](std::int32_t x) { EXPECT_EQ(x, 7); },
               [](caf::error& e) { ADD_FAILURE() << describe(e); });

  const auto es = events->snapshot();
  std::vector<std::chrono::nanoseconds> delays;
  std::vector<std::string> reasons;
  for (const auto& e : es) {
    if (e.what == supervisor_event::kind::restart_scheduled) delays.push_back(e.delay);
    if (e.what == supervisor_event::kind::failed) reasons.push_back(e.reason);
  }
  // Exponential backoff without jitter: 1, 2, 4 ms, in that order.
  EXPECT_EQ(delays, (std::vector<std::chrono::nanoseconds>{1ms, 2ms, 4ms}));
  ASSERT_EQ(reasons.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(reasons[i].find("boom " + std::to_string(i + 1)), std::string::npos) << reasons[i];
    EXPECT_NE(reasons[i].find("exception"), std::string::npos) << reasons[i];
  }
  EXPECT_EQ(ended->snapshot().size(), 3u);

  self->monitor(sup);
  self->send_exit(sup, caf::exit_reason::user_shutdown);
  await_down(self, sup);
}

TEST_F(supervisor_test, escalates_a_child_that_keeps_failing_naming_it_and_its_reasons) {
  auto events = std::make_shared<event_log>();
  auto ended = std::make_shared<name_log>();
  auto sup = spawn_supervisor(sys(), fast_config("root", events, 2),
                              {make_child("steady", worker, ended, std::string{"steady"}),
                               make_child("flaky", crash_on_start, std::string{"no device"})});
  caf::scoped_actor self{sys()};
  self->monitor(sup);
  const auto reason = await_down(self, sup);
  EXPECT_EQ(from_caf_error(reason), make_error_code(actor_errc::child_escalated));
  const auto text = describe(reason);
  EXPECT_NE(text.find("'flaky'"), std::string::npos) << text;
  EXPECT_NE(text.find("'root'"), std::string::npos) << text;
  EXPECT_NE(text.find("no device"), std::string::npos) << text;

  const auto es = events->snapshot();
  EXPECT_EQ(count(es, supervisor_event::kind::failed, "flaky"), 3u);  // 2 restarts, then give up
  EXPECT_EQ(count(es, supervisor_event::kind::started, "flaky"), 3u);
  EXPECT_EQ(count(es, supervisor_event::kind::escalated, "flaky"), 1u);
  // The healthy sibling was stopped, not restarted.
  EXPECT_EQ(count(es, supervisor_event::kind::started, "steady"), 1u);
  EXPECT_EQ(count(es, supervisor_event::kind::stopped, "steady"), 1u);
  EXPECT_EQ(ended->snapshot(), std::vector<std::string>{"steady"});
}

TEST_F(supervisor_test, shutdown_stops_children_in_reverse_order_and_leaves_nothing_running) {
  auto events = std::make_shared<event_log>();
  auto ended = std::make_shared<name_log>();
  auto sup = spawn_supervisor(sys(), fast_config("root", events),
                              {make_child("a", worker, ended, std::string{"a"}),
                               make_child("b", worker, ended, std::string{"b"}),
                               make_child("c", worker, ended, std::string{"c"})});
  {
    caf::scoped_actor self{sys()};
    self->monitor(sup);
    self->send_exit(sup, caf::exit_reason::user_shutdown);
    const auto reason = await_down(self, sup);
    EXPECT_EQ(reason, caf::exit_reason::user_shutdown);
  }
  EXPECT_EQ(ended->snapshot(), (std::vector<std::string>{"c", "b", "a"}));
  for (const char* name : {"a", "b", "c"}) {
    EXPECT_EQ(count(events->snapshot(), supervisor_event::kind::failed, name), 0u);
  }
  // Teardown (the fixture destroys the actor system) must not hang either.
  for (int i = 0; i < 1000 && running_actors() != 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(running_actors(), 0u);
}

TEST_F(supervisor_test, a_killed_child_is_restarted_and_unknown_names_are_refused) {
  auto events = std::make_shared<event_log>();
  auto ended = std::make_shared<name_log>();
  auto sup = spawn_supervisor(sys(), fast_config("root", events),
                              {make_child("w", worker, ended, std::string{"w"})});
  caf::scoped_actor self{sys()};
  auto first = child_of(self, sup, "w");
  self->send_exit(first, caf::exit_reason::kill);
  ASSERT_TRUE(events->wait_until(
      [](const auto& es) { return count(es, supervisor_event::kind::started, "w") == 2; }));
  auto second = child_of(self, sup, "w");
  EXPECT_NE(first.address(), second.address());

  self->request(sup, caf::infinite, child_atom::value, std::string{"nobody"})
      .receive([](caf::actor&) { ADD_FAILURE() << "an unknown child was found"; },
               [](caf::error& e) {
                 EXPECT_EQ(from_caf_error(e), make_error_code(actor_errc::no_such_child));
               });

  // A child added while running is supervised like the others.
  caf::actor added;
  self->request(sup, caf::infinite, start_child_atom::value,
                make_child("late", worker, ended, std::string{"late"}))
      .receive([&](caf::actor& a) { added = a; },
               [](caf::error& e) { ADD_FAILURE() << describe(e); });
  ASSERT_TRUE(added);
  self->send(added, crash_atom::value, std::string{"late crash"});
  ASSERT_TRUE(events->wait_until(
      [](const auto& es) { return count(es, supervisor_event::kind::started, "late") == 2; }));

  self->monitor(sup);
  self->send_exit(sup, caf::exit_reason::user_shutdown);
  await_down(self, sup);
  EXPECT_EQ(ended->snapshot().back(), "w");  // "late" (added last) stopped first
}

TEST_F(supervisor_test, nested_supervisor_escalation_restarts_the_subtree) {
  auto events = std::make_shared<event_log>();
  auto ended = std::make_shared<name_log>();
  auto inner = supervisor_child("inner", fast_config("inner", events, 1),
                                {make_child("leaf", worker, ended, std::string{"leaf"})});
  auto root = spawn_supervisor(sys(), fast_config("root", events, 3), {inner});
  caf::scoped_actor self{sys()};
  // Two crashes of the leaf: the inner supervisor (limit 1) escalates on the second.
  for (int i = 1; i <= 2; ++i) {
    auto inner_sup = child_of(self, root, "inner");
    ASSERT_TRUE(inner_sup);
    auto leaf = child_of(self, inner_sup, "leaf");
    ASSERT_TRUE(leaf);
    self->send(leaf, crash_atom::value, std::string{"leaf crash"});
    ASSERT_TRUE(events->wait_until([&](const auto& es) {
      return count(es, supervisor_event::kind::started, "leaf") == static_cast<std::size_t>(i) + 1;
    }));
  }
  // The new inner supervisor starts its leaf before the root has recorded starting it: wait for
  // both.
  ASSERT_TRUE(events->wait_until(
      [](const auto& es) { return count(es, supervisor_event::kind::started, "inner") == 2; }));
  const auto es = events->snapshot();
  EXPECT_EQ(count(es, supervisor_event::kind::escalated, "leaf"), 1u);
  EXPECT_EQ(count(es, supervisor_event::kind::failed, "inner"), 1u);
  EXPECT_EQ(count(es, supervisor_event::kind::started, "inner"), 2u);
  for (const auto& e : es) {
    if (e.what == supervisor_event::kind::failed && e.child == "inner") {
      EXPECT_NE(e.reason.find("child 'leaf'"), std::string::npos) << e.reason;
    }
  }
  // The new subtree works, and stopping the root stops all of it.
  auto leaf = child_of(self, child_of(self, root, "inner"), "leaf");
  self->request(leaf, caf::infinite, echo_atom::value, std::int32_t{3})
      .receive([](std::int32_t x) { EXPECT_EQ(x, 3); },
               [](caf::error& e) { ADD_FAILURE() << describe(e); });
  self->monitor(root);
  self->send_exit(root, caf::exit_reason::user_shutdown);
  await_down(self, root);
  EXPECT_EQ(ended->snapshot().size(), 3u);
}

}  // namespace
}  // namespace vessel::actors
