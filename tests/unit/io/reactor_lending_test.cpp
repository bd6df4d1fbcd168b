// Caller-driven progress: a thread borrows the reactor's loop (reactor_config::lendable), runs its
// turns, and gives it back; the reactor thread parks meanwhile and takes the loop back after the
// linger. Every test waits for events (a flag, a count), never for a duration.

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "io/io_op.hpp"
#include "io/reactor.hpp"
#include "tests/unit/io/reactor_test_support.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;

using testing::eventually;
using testing::lendable;

/// Posts `fn` and waits until it ran (on whichever thread holds the loop).
template <class Fn>
bool run_on_loop(reactor& r, Fn fn) {
  std::atomic<bool> ran{false};
  if (!r.post([&] {
        fn();
        ran.store(true, std::memory_order_release);
      })) {
    return false;
  }
  return eventually([&] { return ran.load(std::memory_order_acquire); });
}

struct counting_poller final : loop_poller {
  explicit counting_poller(reactor& r) : owner{r} {}
  void poll() noexcept override {
    if (owner.lent()) {
      ++lent_polls;
    } else {
      ++reactor_polls;
    }
  }
  reactor& owner;
  int lent_polls = 0;     // loop owner only
  int reactor_polls = 0;  // loop owner only
};

TEST(reactor_lending, a_borrower_runs_posted_work_and_timers_on_its_own_thread) {
  reactor r{lendable()};
  ASSERT_TRUE(r.start());
  ASSERT_FALSE(r.is_reactor_thread());
  ASSERT_TRUE(r.borrow());
  EXPECT_TRUE(r.is_reactor_thread());
  EXPECT_TRUE(r.lent());

  const auto me = std::this_thread::get_id();
  std::thread::id ran_on{};
  r.post([&] { ran_on = std::this_thread::get_id(); });
  bool timer_ran = false;
  r.add_timer(1ms, [&] { timer_ran = true; });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((ran_on == std::thread::id{} || !timer_ran) && std::chrono::steady_clock::now() < deadline) {
    r.borrowed_turn();
  }
  EXPECT_EQ(ran_on, me);
  EXPECT_TRUE(timer_ran);
  r.give_back();
  EXPECT_FALSE(r.is_reactor_thread());
  r.stop();
}

TEST(reactor_lending, the_reactor_thread_takes_the_loop_back_after_the_linger) {
  reactor r{lendable(200us)};
  ASSERT_TRUE(r.start());
  ASSERT_TRUE(r.borrow());
  r.borrowed_turn();
  r.give_back();  // lingering: the reactor thread comes back on its own
  std::thread::id ran_on{};
  ASSERT_TRUE(run_on_loop(r, [&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_NE(ran_on, std::thread::id{});
  r.stop();
}

TEST(reactor_lending, giving_back_without_linger_hands_the_loop_over_at_once) {
  // A linger far beyond the test's patience: only give_back(false) can bring the thread back.
  reactor r{lendable(std::chrono::microseconds{std::chrono::hours{1}})};
  ASSERT_TRUE(r.start());
  ASSERT_TRUE(r.borrow());
  r.give_back(false);
  std::thread::id ran_on{};
  ASSERT_TRUE(run_on_loop(r, [&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_NE(ran_on, std::this_thread::get_id());
  r.stop();
}

TEST(reactor_lending, a_second_borrower_is_refused_while_the_first_holds_the_loop) {
  reactor r{lendable()};
  ASSERT_TRUE(r.start());
  ASSERT_TRUE(r.borrow());
  bool second = true;
  std::thread other{[&] { second = r.borrow(); }};
  other.join();
  EXPECT_FALSE(second);
  r.give_back();
  // Free again (the reactor thread lingers): another thread gets it without a hand-off.
  std::thread third{[&] {
    second = r.borrow();
    if (second) r.give_back();
  }};
  third.join();
  EXPECT_TRUE(second);
  r.stop();
}

TEST(reactor_lending, try_borrow_takes_only_a_loop_nobody_holds) {
  // A linger far beyond the test's patience: the loop stays free after a lingering give_back.
  reactor r{lendable(std::chrono::microseconds{std::chrono::hours{1}})};
  ASSERT_TRUE(r.start());
  // The reactor thread holds the loop (it waits in the kernel): try_borrow neither asks it to
  // let go nor waits for it.
  EXPECT_FALSE(r.try_borrow());
  ASSERT_TRUE(run_on_loop(r, [] {}));  // and its thread still runs the loop
  ASSERT_TRUE(r.borrow());
  bool other_got_it = true;
  std::thread other{[&] { other_got_it = r.try_borrow(); }};
  other.join();
  EXPECT_FALSE(other_got_it);  // a borrower holds it
  r.give_back();               // lingering: free, the reactor thread parked
  std::thread third{[&] {
    other_got_it = r.try_borrow();
    if (other_got_it) {
      EXPECT_TRUE(r.is_reactor_thread());
      EXPECT_TRUE(r.lent());
      r.give_back(false);
    }
  }};
  third.join();
  EXPECT_TRUE(other_got_it);
  std::thread::id ran_on{};
  ASSERT_TRUE(run_on_loop(r, [&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_NE(ran_on, std::this_thread::get_id());  // handed back at once: the reactor thread
  r.allow_lending(false);
  EXPECT_FALSE(r.try_borrow());
  r.stop();
  r.allow_lending(true);
  EXPECT_FALSE(r.try_borrow());
}

TEST(reactor_lending, borrowing_is_refused_when_not_lendable_disallowed_or_stopping) {
  reactor plain{reactor_config{}};
  ASSERT_TRUE(plain.start());
  EXPECT_FALSE(plain.borrow());
  plain.stop();

  reactor r{lendable()};
  ASSERT_TRUE(r.start());
  r.allow_lending(false);
  EXPECT_FALSE(r.lending_allowed());
  EXPECT_FALSE(r.borrow());
  r.allow_lending(true);
  EXPECT_TRUE(r.borrow());
  r.give_back();
  r.stop();
  EXPECT_FALSE(r.borrow());
}

TEST(reactor_lending, pollers_run_on_borrowed_turns_and_once_when_the_thread_takes_back) {
  reactor r{lendable(100us)};
  ASSERT_TRUE(r.start());
  counting_poller poller{r};
  ASSERT_TRUE(run_on_loop(r, [&] { r.add_poller(poller); }));
  ASSERT_TRUE(r.borrow());
  for (int i = 0; i < 10; ++i) r.borrowed_turn();
  EXPECT_EQ(poller.lent_polls, 10);
  EXPECT_EQ(poller.reactor_polls, 0);
  r.give_back(false);
  int reactor_polls = 0;
  ASSERT_TRUE(eventually([&] {
    run_on_loop(r, [&] { reactor_polls = poller.reactor_polls; });
    return reactor_polls >= 1;
  }));
  ASSERT_TRUE(run_on_loop(r, [&] { r.remove_poller(poller); }));
  r.stop();
}

TEST(reactor_lending, an_op_a_borrower_arms_outlives_the_borrowers_thread) {
  // Only the reactor thread submits: an op belongs to the thread that submitted it, and a
  // blocking READ (an eventfd, as the reactor's own wake-up and the shm receiver use) runs in
  // that thread's io-wq, cancelled when the thread exits. Borrowed by a thread that then ends,
  // the op must still complete with the value written, not with -ECANCELED.
  struct read_op final : io_op {
    void complete(int r, std::uint32_t) override {
      res.store(r, std::memory_order_release);
      done.store(true, std::memory_order_release);
    }
    std::uint64_t value = 0;
    std::atomic<int> res{0};
    std::atomic<bool> done{false};
  };
  reactor r{lendable(100us)};
  ASSERT_TRUE(r.start());
  const int efd = ::eventfd(0, EFD_CLOEXEC);  // blocking: io_uring punts the READ to io-wq
  ASSERT_GE(efd, 0);
  read_op op;
  bool borrowed = false;
  std::thread borrower{[&] {
    borrowed = r.borrow();
    if (!borrowed) return;
    r.read(op, efd, {reinterpret_cast<std::byte*>(&op.value), sizeof op.value});
    for (int i = 0; i < 10; ++i) r.borrowed_turn();
    r.give_back(false);
  }};
  borrower.join();  // the thread that armed the op is gone
  ASSERT_TRUE(borrowed);
  // A cancellation at the thread's exit would complete the op now, with nothing written.
  const auto until = std::chrono::steady_clock::now() + 50ms;
  while (!op.done.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  EXPECT_FALSE(op.done.load()) << "completed with nothing written: " << op.res.load();
  const std::uint64_t seven = 7;
  ASSERT_EQ(::write(efd, &seven, sizeof seven), static_cast<ssize_t>(sizeof seven));
  ASSERT_TRUE(eventually([&] { return op.done.load(std::memory_order_acquire); }));
  EXPECT_EQ(op.res.load(), static_cast<int>(sizeof seven));
  EXPECT_EQ(op.value, 7u);
  r.stop();
  ::close(efd);
}

TEST(reactor_lending, stop_while_lent_waits_for_the_borrower_and_finishes) {
  reactor r{lendable()};
  ASSERT_TRUE(r.start());
  std::atomic<bool> holding{false};
  std::atomic<int> turns{0};
  std::thread borrower{[&] {
    ASSERT_TRUE(r.borrow());
    holding.store(true);
    while (!r.stop_requested()) {
      r.borrowed_turn();
      turns.fetch_add(1, std::memory_order_relaxed);
    }
    r.give_back();
  }};
  ASSERT_TRUE(eventually([&] { return holding.load(); }));
  r.stop();  // joins the reactor thread, which needs the loop back first
  borrower.join();
  EXPECT_GT(turns.load(), 0);
  EXPECT_FALSE(r.borrow());
}

TEST(reactor_lending, many_threads_borrow_and_post_and_every_item_runs_once) {
  reactor r{lendable(50us)};
  ASSERT_TRUE(r.start());
  constexpr int threads = 4;
  constexpr int rounds = 2000;
  std::atomic<int> ran{0};
  std::atomic<int> wrong_thread{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        r.post([&] {
          if (!r.is_reactor_thread()) wrong_thread.fetch_add(1);
          ran.fetch_add(1, std::memory_order_relaxed);
        });
        if (r.borrow()) {
          r.borrowed_turn();
          r.give_back(i % 7 != 0);
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_TRUE(eventually([&] { return ran.load() == threads * rounds; }));
  EXPECT_EQ(wrong_thread.load(), 0);
  r.stop();
}

}  // namespace
}  // namespace vessel::io
