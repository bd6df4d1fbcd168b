// Timers: the timer_queue alone, then on a driven reactor (with EXT_ARG waits and the TIMEOUT-SQE
// fallback that liburing uses without it).

#include <chrono>
#include <vector>

#include <gtest/gtest.h>

#include "io/reactor.hpp"
#include "io/timer_queue.hpp"
#include "tests/unit/io/reactor_test_support.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

TEST(timer_queue, runs_due_timers_earliest_first_and_ties_in_add_order) {
  timer_queue q;
  const auto t0 = clock_type::now();
  std::vector<int> order;
  q.add(t0 + 3ms, [&] { order.push_back(3); });
  q.add(t0 + 1ms, [&] { order.push_back(1); });
  q.add(t0 + 2ms, [&] { order.push_back(2); });
  q.add(t0 + 2ms, [&] { order.push_back(22); });
  q.add(t0 + 9ms, [&] { order.push_back(9); });
  EXPECT_EQ(q.run_due(t0), 0u);
  EXPECT_EQ(q.run_due(t0 + 3ms), 4u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 22, 3}));
  EXPECT_EQ(q.next_deadline(), t0 + 9ms);
}

TEST(timer_queue, cancelled_timer_never_runs_and_cancel_reports_it_once) {
  timer_queue q;
  const auto t0 = clock_type::now();
  bool ran = false;
  const auto id = q.add(t0 + 1ms, [&] { ran = true; });
  EXPECT_TRUE(q.cancel(id));
  EXPECT_FALSE(q.cancel(id));
  EXPECT_EQ(q.run_due(t0 + 1s), 0u);
  EXPECT_FALSE(ran);
  EXPECT_FALSE(q.next_deadline().has_value());
}

TEST(timer_queue, timers_added_by_a_callback_wait_for_the_next_run) {
  timer_queue q;
  const auto t0 = clock_type::now();
  int runs = 0;
  std::function<void()> again = [&] {
    ++runs;
    q.add(t0, again);  // already due: must not loop within one run_due
  };
  q.add(t0, again);
  EXPECT_EQ(q.run_due(t0), 1u);
  EXPECT_EQ(q.run_due(t0), 1u);
  EXPECT_EQ(runs, 2);
}

TEST(timer_queue, heavy_cancel_churn_keeps_the_heap_small) {
  timer_queue q;
  const auto t0 = clock_type::now();
  for (int i = 0; i < 100'000; ++i) q.cancel(q.add(t0 + 1h, [] {}));
  EXPECT_EQ(q.size(), 0u);
  EXPECT_FALSE(q.next_deadline().has_value());
}

class reactor_timers : public ::testing::TestWithParam<bool> {};

TEST_P(reactor_timers, timers_fire_in_deadline_order_and_never_early) {
  reactor r{testing::driven(GetParam())};
  ASSERT_TRUE(r.start());
  struct fired {
    int tag;
    clock_type::time_point due, at;
  };
  std::vector<fired> log;
  const auto t0 = clock_type::now();
  for (int ms : {30, 10, 20, 5, 25}) {
    const auto due = t0 + std::chrono::milliseconds{ms};
    r.add_timer(due - clock_type::now(), [&log, ms, due] { log.push_back({ms, due, clock_type::now()}); });
  }
  ASSERT_TRUE(testing::run_until(r, [&] { return log.size() == 5; }));
  std::vector<int> order;
  for (auto& f : log) {
    order.push_back(f.tag);
    EXPECT_GE(f.at, f.due) << "timer " << f.tag << " fired early";
  }
  EXPECT_EQ(order, (std::vector<int>{5, 10, 20, 25, 30}));
}

TEST_P(reactor_timers, cancelled_timers_never_fire) {
  reactor r{testing::driven(GetParam())};
  ASSERT_TRUE(r.start());
  int cancelled_ran = 0;
  bool sentinel = false;
  std::vector<timer_id> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(r.add_timer(5ms, [&] { ++cancelled_ran; }));
  r.add_timer(20ms, [&] { sentinel = true; });
  for (auto id : ids) EXPECT_TRUE(r.cancel_timer(id));
  ASSERT_TRUE(testing::run_until(r, [&] { return sentinel; }));
  EXPECT_EQ(cancelled_ran, 0);
}

TEST_P(reactor_timers, a_sleeping_reactor_wakes_for_its_timer_without_other_events) {
  reactor_config config;
  config.allowed = GetParam() ? uring_features::all() : uring_features::none();
  reactor r{config};  // own thread, waiting for ever unless the timer bounds the wait
  ASSERT_TRUE(r.start());
  std::atomic<bool> fired{false};
  const auto t0 = clock_type::now();
  std::atomic<clock_type::time_point::rep> at{0};
  r.post([&] {
    r.add_timer(15ms, [&] {
      at = clock_type::now().time_since_epoch().count();
      fired = true;
    });
  });
  const auto limit = t0 + 5s;
  while (!fired.load() && clock_type::now() < limit) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(fired.load());
  EXPECT_GE(clock_type::duration{at.load()}, (t0 + 15ms).time_since_epoch());
}

// A reactor whose turns never wait (a resident actor's hops keep posting) reads the clock for its
// timers only on some of them (reactor.cpp, timers_may_be_due): a due timer still runs within a
// few turns, whether the clock read is skipped because the deadline is far or spaced out near it.
TEST_P(reactor_timers, a_reactor_that_never_waits_runs_a_due_timer_within_eight_turns) {
  reactor r{testing::driven(GetParam())};
  ASSERT_TRUE(r.start());
  testing::reposting_item busy{&r};
  busy.start();
  bool fired = false;
  r.add_timer(20ms, [&] { fired = true; });
  const auto due = clock_type::now() + 20ms;  // at or after the timer's own deadline
  int turns_after_due = 0;
  const auto limit = due + 5s;
  while (!fired && clock_type::now() < limit) {
    r.run_once(0ns);
    if (!fired && clock_type::now() >= due) ++turns_after_due;
  }
  ASSERT_TRUE(fired);
  EXPECT_LE(turns_after_due, 8);
  r.stop();
  r.run();
}

TEST_P(reactor_timers, pending_timers_are_dropped_unrun_at_stop) {
  reactor r{testing::driven(GetParam())};
  ASSERT_TRUE(r.start());
  bool ran = false;
  r.add_timer(1h, [&] { ran = true; });
  r.stop();
  r.run();
  EXPECT_FALSE(ran);
}

INSTANTIATE_TEST_SUITE_P(paths, reactor_timers, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "better" : "fallback"; });

}  // namespace
}  // namespace vessel::io
