// Cross-thread hand-off: post() from many threads, wake-ups of a sleeping reactor, dispatch().

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "io/reactor.hpp"
#include "tests/unit/io/reactor_test_support.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;

struct producer_log {
  std::uint32_t next = 0;      // next sequence number expected from this producer
  std::uint32_t out_of_order = 0;
  std::uint32_t wrong_thread = 0;
  reactor* r = nullptr;
};

struct item_slot {
  producer_log* log;
  std::uint32_t seq;
  std::atomic<std::uint32_t> runs{0};
};

void run_slot(void* ctx) noexcept {
  auto* s = static_cast<item_slot*>(ctx);
  if (s->seq != s->log->next) ++s->log->out_of_order;
  s->log->next = s->seq + 1;
  if (!s->log->r->is_reactor_thread()) ++s->log->wrong_thread;
  s->runs.fetch_add(1, std::memory_order_relaxed);
}

TEST(reactor_post, every_item_from_many_producers_runs_once_in_producer_order) {
  constexpr int producers = 4;
  constexpr std::uint32_t items = 100'000;
  reactor_config config;
  config.post_capacity = 4096;  // small enough that producers also hit the full-queue path
  reactor r{config};
  ASSERT_TRUE(r.start());

  std::vector<producer_log> logs(producers);
  std::vector<std::unique_ptr<item_slot[]>> slots;
  for (auto& log : logs) {
    log.r = &r;
    slots.emplace_back(new item_slot[items]);
    for (std::uint32_t i = 0; i < items; ++i) {
      slots.back()[i].log = &log;
      slots.back()[i].seq = i;
    }
  }
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint32_t i = 0; i < items; ++i) {
        if (!r.post(work_item{&run_slot, &slots[p][i]})) refused.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::atomic<bool> drained{false};
  ASSERT_TRUE(r.post([&] { drained.store(true); }));  // FIFO per producer: runs after ours
  while (!drained.load()) std::this_thread::yield();
  r.stop();

  EXPECT_EQ(refused.load(), 0);
  for (int p = 0; p < producers; ++p) {
    EXPECT_EQ(logs[p].next, items);
    EXPECT_EQ(logs[p].out_of_order, 0u);
    EXPECT_EQ(logs[p].wrong_thread, 0u);
    std::uint32_t not_once = 0;
    for (std::uint32_t i = 0; i < items; ++i) not_once += slots[p][i].runs.load() != 1 ? 1 : 0;
    EXPECT_EQ(not_once, 0u) << "producer " << p;
  }
}

// Each round trip lets the reactor go back to sleep before the next post, so every post has to
// find the sleeping bit and write the eventfd; one lost wake-up hangs the round (caught by limit).
TEST(reactor_post, wake_up_is_not_lost_across_post_sleep_post_cycles) {
  constexpr int producers = 4;
  constexpr int rounds = 500;
  reactor r;
  ASSERT_TRUE(r.start());
  std::atomic<int> lost{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < rounds; ++i) {
        std::atomic<bool> ran{false};
        ASSERT_TRUE(r.post([&ran] { ran.store(true, std::memory_order_release); }));
        const auto limit = std::chrono::steady_clock::now() + 5s;
        while (!ran.load(std::memory_order_acquire)) {
          if (std::chrono::steady_clock::now() > limit) {
            lost.fetch_add(1);
            return;
          }
          std::this_thread::yield();
        }
        if ((i + p) % 50 == 0) std::this_thread::sleep_for(1ms);  // make sure it really sleeps
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(lost.load(), 0);
}

TEST(reactor_post, dispatch_runs_inline_on_the_reactor_thread_and_posts_from_elsewhere) {
  reactor r{testing::driven(true)};
  ASSERT_TRUE(r.start());
  EXPECT_TRUE(r.is_reactor_thread());
  bool ran = false;
  EXPECT_TRUE(r.dispatch([&] { ran = true; }));
  EXPECT_TRUE(ran);

  std::atomic<bool> from_other{false};
  std::atomic<bool> other_is_reactor{true};
  std::thread t{[&] {
    other_is_reactor = r.is_reactor_thread();
    r.dispatch([&] { from_other = true; });
  }};
  t.join();
  EXPECT_FALSE(other_is_reactor.load());
  EXPECT_FALSE(from_other.load());  // queued, not run on the foreign thread
  EXPECT_TRUE(testing::run_until(r, [&] { return from_other.load(); }));
}

// A resident actor's message is a chain of posts (flush, take, handler): the chain runs within
// one turn rather than one link per turn, but only for a few passes, so that a chain that never
// ends (a transport's continuation) leaves the turn's timers and completions their time.
TEST(reactor_post, what_posted_items_post_runs_in_the_same_turn_for_a_few_passes) {
  reactor_config config;
  config.own_thread = false;
  reactor r{config};
  ASSERT_TRUE(r.start());
  const auto passes = static_cast<int>(reactor::max_posted_passes);
  ASSERT_GE(passes, 2);
  testing::reposting_item chain{&r};
  chain.start();
  ASSERT_TRUE(r.run_once(std::chrono::nanoseconds::zero()));
  EXPECT_EQ(chain.runs, passes);
  int timer_runs = 0;
  r.add_timer(std::chrono::nanoseconds::zero(), [&] { ++timer_runs; });
  ASSERT_TRUE(r.run_once(std::chrono::nanoseconds::zero()));
  EXPECT_EQ(chain.runs, 2 * passes);  // the turn ended though the chain did not
  // The turns look at timers through a coarse clock (reactor.cpp, timers_may_be_due).
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (timer_runs == 0 && std::chrono::steady_clock::now() < give_up)
    r.run_once(std::chrono::nanoseconds::zero());
  EXPECT_EQ(timer_runs, 1);  // timers still run between the chain's turns
  r.stop();
}

TEST(reactor_post, post_after_stop_is_refused_and_never_runs) {
  reactor r;
  ASSERT_TRUE(r.start());
  r.stop();
  bool ran = false;
  EXPECT_FALSE(r.post([&] { ran = true; }));
  EXPECT_FALSE(ran);
}

TEST(reactor_post, items_posted_before_start_run_after_start) {
  reactor r;
  std::atomic<bool> ran{false};
  ASSERT_TRUE(r.post([&] { ran = true; }));
  ASSERT_TRUE(r.start());
  const auto limit = std::chrono::steady_clock::now() + 5s;
  while (!ran.load() && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
  EXPECT_TRUE(ran.load());
}

}  // namespace
}  // namespace vessel::io
