// How a reactor waits: DEFER_TASKRUN where the kernel has it, the bounded adaptive busy-poll
// before blocking, and the per-send zero-copy policy.

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <thread>
#include <vector>

#include "io/reactor.hpp"
#include "tests/unit/io/reactor_test_support.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;
using testing::fn_op;

long voluntary_switches() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

std::chrono::nanoseconds thread_cpu_time() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec};
}

struct socket_pair {
  socket_pair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd.data()), 0); }
  ~socket_pair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  std::array<int, 2> fd{-1, -1};
};

// A connected loopback TCP pair (SEND_ZC needs a TCP or UDP socket: AF_UNIX refuses it).
struct tcp_pair {
  tcp_pair() {
    const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(lfd, 1), 0);
    EXPECT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    fd[0] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(::connect(fd[0], reinterpret_cast<sockaddr*>(&a), len), 0);
    fd[1] = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(lfd);
  }
  ~tcp_pair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  std::array<int, 2> fd{-1, -1};
};

// One receive that a writer ends `delay` later, driven by run_once on this thread: the voluntary
// context switches it took (0: the reactor never slept).
long switches_for_a_delayed_receive(reactor& r, socket_pair& sp,
                                    std::chrono::milliseconds delay = 20ms) {
  std::array<std::byte, 16> buf{};
  int got = 0;
  fn_op recv_op{[&](int res, std::uint32_t) { got = res; }};
  r.recv(recv_op, sp.fd[0], buf);
  r.run_once(0ns);
  std::thread writer{[fd = sp.fd[1], delay] {
    std::this_thread::sleep_for(delay);
    EXPECT_EQ(::write(fd, "ping", 4), 4);
  }};
  const long before = voluntary_switches();
  while (got == 0) r.run_once(std::chrono::nanoseconds{10s});
  const long switches = voluntary_switches() - before;
  writer.join();
  EXPECT_EQ(got, 4);
  return switches;
}

TEST(reactor_wait, defer_taskrun_is_used_where_the_kernel_has_it_and_allowed) {
  reactor with{testing::driven(true)};
  ASSERT_TRUE(with.start());
  reactor without{testing::driven(false)};
  ASSERT_TRUE(without.start());
  // Kernel 6.1 brought DEFER_TASKRUN; the CI kernel is newer. An older one must fall back cleanly.
  if (!with.features().single_issuer) GTEST_SKIP() << "kernel without IORING_SETUP_SINGLE_ISSUER";
  EXPECT_TRUE(with.features().defer_taskrun);
  EXPECT_FALSE(without.features().defer_taskrun);
  with.stop();
  with.run();
  without.stop();
  without.run();
}

// Completions whose task work is deferred still arrive on a turn that does not block (the
// non-sleeping path must ask the kernel for them, or they would wait for the next blocking wait).
TEST(reactor_wait, deferred_completions_arrive_on_a_turn_that_does_not_block) {
  reactor r{testing::driven(true)};
  ASSERT_TRUE(r.start());
  socket_pair sp;
  std::array<std::byte, 16> buf{};
  int got = 0;
  fn_op recv_op{[&](int res, std::uint32_t) { got = res; }};
  r.recv(recv_op, sp.fd[0], buf);
  r.run_once(0ns);  // submits the recv without waiting
  ASSERT_EQ(::write(sp.fd[1], "ping", 4), 4);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (got == 0 && std::chrono::steady_clock::now() < deadline) r.run_once(0ns);
  EXPECT_EQ(got, 4);
  r.stop();
  r.run();
}

// With busy_poll, a completion that comes within the window is reaped without the thread ever
// sleeping: no voluntary context switch. Without it the same exchange sleeps (which shows that
// the measurement can see a sleep).
TEST(reactor_wait, busy_poll_reaps_a_completion_without_sleeping) {
  for (const bool spin : {false, true}) {
    auto config = testing::driven(true);
    config.busy_poll =
        spin ? std::chrono::nanoseconds{2s} : 0ns;  // far longer than the writer's delay
    reactor r{config};
    ASSERT_TRUE(r.start());
    socket_pair sp;
    const long switches = switches_for_a_delayed_receive(r, sp);
    if (spin) {
      EXPECT_EQ(switches, 0) << "the busy-polling reactor slept";
    } else {
      EXPECT_GE(switches, 1) << "a blocking wait did not show as a voluntary switch";
    }
    r.stop();
    r.run();
  }
}

// set_busy_poll() on a reactor that started without it: polling (here yielding between checks,
// which is no sleep either) from the next turn on, and off again.
TEST(reactor_wait, set_busy_poll_turns_polling_on_and_off_while_running) {
  reactor r{testing::driven(true)};
  ASSERT_TRUE(r.start());
  socket_pair sp;

  EXPECT_GE(switches_for_a_delayed_receive(r, sp), 1)
      << "a blocking wait did not show as a voluntary switch";
  ASSERT_TRUE(r.set_busy_poll(2s, /*yield_while_polling=*/true));
  EXPECT_EQ(switches_for_a_delayed_receive(r, sp), 0) << "the polling reactor slept";
  ASSERT_TRUE(r.set_busy_poll(0ns, false));
  EXPECT_GE(switches_for_a_delayed_receive(r, sp), 1) << "polling did not go off";
  r.stop();
  r.run();
}

// An idle reactor stops spinning after a few fruitless spins: over 30 idle turns with a 2 ms
// window it burns a few windows' worth of CPU, not 30.
TEST(reactor_wait, an_idle_reactor_stops_spinning) {
  auto config = testing::driven(true);
  config.busy_poll = 2ms;
  reactor r{config};
  ASSERT_TRUE(r.start());
  const auto cpu0 = thread_cpu_time();
  for (int i = 0; i < 30; ++i) r.run_once(5ms);
  const auto cpu = thread_cpu_time() - cpu0;
  EXPECT_LT(cpu, 30ms) << "spun " << std::chrono::duration<double, std::milli>(cpu).count()
                       << " ms of 60 ms it could have";
  r.stop();
  r.run();
}

// After spinning has been switched off, a blocking wait that ends within the window turns it
// back on: the next completion is again reaped without a sleep.
TEST(reactor_wait, a_short_blocking_wait_turns_busy_poll_back_on) {
  auto config = testing::driven(true);
  config.busy_poll = 50ms;
  reactor r{config};
  ASSERT_TRUE(r.start());
  for (int i = 0; i < 8; ++i) r.run_once(51ms);  // idle: spinning goes off
  socket_pair sp;
  std::array<std::byte, 16> buf{};
  int got = 0;
  fn_op recv_op{[&](int res, std::uint32_t) { got = res; }};
  // A blocking wait (spinning is off) that data ends at once: short, so spinning comes back.
  r.recv(recv_op, sp.fd[0], buf);
  ASSERT_EQ(::write(sp.fd[1], "a", 1), 1);
  while (got == 0) r.run_once(10s);
  EXPECT_EQ(switches_for_a_delayed_receive(r, sp, 5ms), 0)
      << "spinning did not come back after a short wait";
  r.stop();
  r.run();
}

// A post from another thread ends the spin (the producer writes no eventfd while the reactor is
// awake, so the spin itself must notice the queue).
TEST(reactor_wait, a_post_ends_the_spin) {
  auto config = testing::driven(true);
  config.busy_poll = 2s;
  reactor r{config};
  ASSERT_TRUE(r.start());
  using steady = std::chrono::steady_clock;
  std::atomic<bool> ran{false};
  std::atomic<steady::rep> posted_at{0};
  steady::time_point ran_at{};
  std::thread poster{[&] {
    std::this_thread::sleep_for(50ms);  // by then the reactor spins (its window is 2 s)
    posted_at.store(steady::now().time_since_epoch().count());
    EXPECT_TRUE(r.post([&] {
      ran_at = steady::now();
      ran.store(true);
    }));
  }};
  while (!ran.load()) r.run_once(2s);  // >= the window, so that the turn spins
  poster.join();
  // Timed from the post to the item's run: a spin blind to the queue would add its 2 s window.
  const auto took = ran_at - steady::time_point{steady::duration{posted_at.load()}};
  EXPECT_LT(took, 1s) << "the post waited for the spin window to run out";
  r.stop();
  r.run();
}

// zero_copy::never keeps a large send off SEND_ZC (no notification CQE), where when_large uses it.
TEST(reactor_wait, zero_copy_never_sends_large_buffers_with_a_copy) {
  reactor r{testing::driven(true)};
  ASSERT_TRUE(r.start());
  if (!r.features().send_zc) GTEST_SKIP() << "kernel without IORING_OP_SEND_ZC";
  for (const auto zc : {zero_copy::when_large, zero_copy::never}) {
    tcp_pair sp;
    std::vector<std::byte> data(r.config().zero_copy_threshold, std::byte{1});
    int notifications = 0;
    bool done = false;
    int sent = 0;
    fn_op send_op{[&](int res, std::uint32_t flags) {
      if ((flags & IORING_CQE_F_NOTIF) != 0)
        ++notifications;
      else
        sent = res;
      if ((flags & IORING_CQE_F_MORE) == 0) done = true;
    }};
    r.send(send_op, sp.fd[0], data, MSG_NOSIGNAL, zc);
    EXPECT_TRUE(testing::run_until(r, [&] { return done; }));
    EXPECT_EQ(sent, static_cast<int>(data.size()));
    EXPECT_EQ(notifications, zc == zero_copy::when_large ? 1 : 0);
  }
  r.stop();
  r.run();
}

}  // namespace
}  // namespace vessel::io
