// Actors hosted on a reactor thread (actors/reactor_hosted.hpp): their messages are handled on
// that thread, in order, however many come at once; plain actors they talk to stay on CAF's
// workers, residents they talk to on the reactor; a busy reactor delays them; a stopped one hands
// them to CAF's scheduler.

#include "actors/reactor_hosted.hpp"

#include <chrono>
#include <memory>

#include <gtest/gtest.h>
#include <caf/all.hpp>

#include "io/reactor.hpp"
#include "tests/unit/actors/caf_test_support.hpp"
#include "tests/unit/actors/reactor_hold.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;
using testing::caf_test;

using where_atom = caf::atom_constant<caf::atom("where")>;
using forward_atom = caf::atom_constant<caf::atom("forward")>;

// Answers (where_atom, n) with n and whether it ran on `reactor`'s thread; (forward_atom, to)
// asks `to` the same and relays the answer.
class probe final : public on_reactor_thread<caf::event_based_actor> {
 public:
  probe(caf::actor_config& cfg, reactor_execution_unit* unit) : on_reactor_thread{cfg, unit} {}

  caf::behavior make_behavior() override {
    return {
        [this](where_atom, int n) {
          return caf::make_message(n, unit().reactor().is_reactor_thread());
        },
        [this](forward_atom, const caf::actor& to) { return delegate(to, where_atom::value, 0); },
    };
  }
};

caf::behavior plain_probe(caf::event_based_actor*, io::reactor* reactor) {
  return {
      [reactor](where_atom, int n) { return caf::make_message(n, reactor->is_reactor_thread()); }};
}

class reactor_hosted_test : public caf_test {
 protected:
  void SetUp() override {
    caf_test::SetUp();
    ASSERT_TRUE(reactor_.start());
    unit_ = std::make_unique<reactor_execution_unit>(sys(), reactor_, /*max_throughput=*/4);
  }
  void TearDown() override {
    reactor_.stop();
    caf_test::TearDown();
  }

  io::reactor reactor_;
  std::unique_ptr<reactor_execution_unit> unit_;
};

TEST_F(reactor_hosted_test, messages_are_handled_on_the_reactor_thread_in_order) {
  caf::scoped_actor self{sys()};
  auto a = sys().spawn<probe>(unit_.get());
  // Many more than one resumption handles (max_throughput 4): the rest come in later turns.
  constexpr int count = 200;
  for (int i = 0; i < count; ++i) self->send(a, where_atom::value, i);
  for (int i = 0; i < count; ++i) {
    self->receive([&](int n, bool on_reactor) {
      EXPECT_EQ(n, i);
      EXPECT_TRUE(on_reactor);
    });
  }
  testing::kill_and_wait(self, a);
}

TEST_F(reactor_hosted_test, actors_it_talks_to_stay_on_cafs_workers) {
  caf::scoped_actor self{sys()};
  auto a = sys().spawn<probe>(unit_.get());
  auto plain = sys().spawn(plain_probe, &reactor_);
  self->request(a, 5s, forward_atom::value, plain)
      .receive([](int, bool on_reactor) { EXPECT_FALSE(on_reactor); },
               [](caf::error& e) { FAIL() << caf::to_string(e); });
  testing::kill_and_wait(self, plain);
  testing::kill_and_wait(self, a);
}

TEST_F(reactor_hosted_test, residents_that_talk_to_each_other_stay_on_the_reactor_thread) {
  caf::scoped_actor self{sys()};
  auto a = sys().spawn<probe>(unit_.get());
  auto b = sys().spawn<probe>(unit_.get());
  for (int i = 0; i < 20; ++i) {
    self->request(a, 5s, forward_atom::value, b)
        .receive([](int, bool on_reactor) { EXPECT_TRUE(on_reactor); },
                 [](caf::error& e) { FAIL() << caf::to_string(e); });
  }
  testing::kill_and_wait(self, b);
  testing::kill_and_wait(self, a);
}

TEST_F(reactor_hosted_test, a_busy_reactor_holds_its_actors_back_until_it_is_free) {
  caf::scoped_actor self{sys()};
  auto a = sys().spawn<probe>(unit_.get());
  testing::reactor_hold hold{reactor_};
  self->send(a, where_atom::value, 1);
  bool answered = false;
  self->receive([&](int, bool) { answered = true; }, caf::after(100ms) >> [] {});
  EXPECT_FALSE(answered) << "the actor ran while its reactor was blocked";
  hold.release();
  if (!answered)
    self->receive([&](int n, bool on_reactor) {
      EXPECT_EQ(n, 1);
      EXPECT_TRUE(on_reactor);
    });
  testing::kill_and_wait(self, a);
}

TEST_F(reactor_hosted_test, once_the_reactor_stopped_its_actors_run_on_cafs_workers) {
  caf::scoped_actor self{sys()};
  auto a = sys().spawn<probe>(unit_.get());
  self->request(a, 5s, where_atom::value, 1)
      .receive([](int, bool on_reactor) { EXPECT_TRUE(on_reactor); },
               [](caf::error& e) { FAIL() << caf::to_string(e); });
  reactor_.stop();
  for (int i = 0; i < 20; ++i) {
    self->request(a, 5s, where_atom::value, i)
        .receive(
            [&](int n, bool on_reactor) {
              EXPECT_EQ(n, i);
              EXPECT_FALSE(on_reactor);
            },
            [](caf::error& e) { FAIL() << caf::to_string(e); });
  }
  testing::kill_and_wait(self, a);
}

}  // namespace
}  // namespace vessel::actors
