// Shutdown: every op in flight completes with -ECANCELED, nothing leaks, no thread stays behind.

#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/reactor.hpp"
#include "tests/unit/io/reactor_test_support.hpp"

namespace vessel::io {
namespace {

using testing::fn_op;

struct socket_pair {
  int fd[2] = {-1, -1};
  socket_pair() { ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd); }
  ~socket_pair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
};

TEST(reactor_stop, start_and_stop_leave_no_thread_behind) {
  const auto before = testing::thread_count();
  {
    reactor r;
    ASSERT_TRUE(r.start());
    EXPECT_EQ(testing::thread_count(), before + 1);
    r.stop();
    EXPECT_EQ(testing::thread_count(), before);
  }
  EXPECT_EQ(testing::thread_count(), before);
}

// liburing maps a ring with raw syscalls, which TSan does not see: a ring mapped where a closed one
// was inherits the dead ring's access history. The second reactor is started by a thread that
// nothing orders after the first reactor's thread (a relaxed flag only), as a mesh's refresh
// thread opening its store client is; under TSan its first SQE writes were reported as races.
TEST(reactor_stop, a_ring_mapped_where_a_closed_one_was_is_new_memory) {
  // A reactor that starts, runs one posted function and stops: a ring opened, used and closed.
  const auto open_use_close = [] {
    reactor r;
    if (!r.start()) return false;
    std::atomic<bool> ran{false};
    r.post([&] { ran.store(true); });
    const bool used = testing::eventually([&] { return ran.load(); });
    r.stop();
    return used;
  };
  std::atomic<bool> first_closed{false};
  std::atomic<bool> second_ok{true};
  std::thread later{[&] {
    while (!first_closed.load(std::memory_order_relaxed)) std::this_thread::yield();
    for (int i = 0; i < 4; ++i) {
      if (!open_use_close()) second_ok.store(false, std::memory_order_relaxed);
    }
  }};
  EXPECT_TRUE(open_use_close());
  first_closed.store(true, std::memory_order_relaxed);
  later.join();
  EXPECT_TRUE(second_ok.load());
}

class reactor_stop_paths : public ::testing::TestWithParam<bool> {};

// Ops of every kind are parked on fds that never become ready; stop must cancel each of them,
// through CANCEL_ANY (better path) or one cancel per op (fallback).
TEST_P(reactor_stop_paths, stop_cancels_every_inflight_operation) {
  const auto before = testing::thread_count();
  constexpr int pairs = 8;
  std::vector<socket_pair> sockets(pairs);
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);

  std::atomic<int> cancelled{0};
  std::atomic<int> other{0};
  auto count = [&](int res, std::uint32_t flags) {
    if ((flags & IORING_CQE_F_MORE) != 0) return;
    (res == -ECANCELED ? cancelled : other).fetch_add(1);
  };
  std::vector<std::unique_ptr<fn_op>> ops;
  for (int i = 0; i < 2 * pairs + 2; ++i) ops.push_back(std::make_unique<fn_op>(count));
  std::byte buf[16][64];
  std::byte pipe_buf[8];

  reactor_config config;
  config.allowed = GetParam() ? uring_features::all() : uring_features::none();
  {
    reactor r{config};
    ASSERT_TRUE(r.start());
    std::atomic<std::size_t> armed{0};
    r.post([&] {
      for (int i = 0; i < pairs; ++i) {
        r.recv(*ops[i], sockets[i].fd[0], buf[i]);
        r.poll_add(*ops[pairs + i], sockets[i].fd[1], POLLIN);
      }
      r.read(*ops[2 * pairs], pipe_fds[0], pipe_buf);
      r.accept(*ops[2 * pairs + 1], listener);
      armed = r.ops_in_flight();
    });
    while (armed.load() == 0) std::this_thread::yield();
    EXPECT_EQ(armed.load(), ops.size());
    r.stop();
    EXPECT_EQ(cancelled.load(), static_cast<int>(ops.size()));
    EXPECT_EQ(other.load(), 0);
    for (auto& op : ops) EXPECT_FALSE(op->in_flight());
  }
  EXPECT_EQ(testing::thread_count(), before);
  ::close(listener);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

INSTANTIATE_TEST_SUITE_P(paths, reactor_stop_paths, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "better" : "fallback"; });

TEST(reactor_stop, op_armed_after_stop_began_completes_with_ecanceled) {
  socket_pair s;
  std::byte buf[8];
  std::vector<int> results;
  reactor* rp = nullptr;
  fn_op second{[&](int res, std::uint32_t) { results.push_back(res); }};
  fn_op first{[&](int res, std::uint32_t) {
    results.push_back(res);
    rp->recv(second, s.fd[0], buf);  // the owner re-arms during stop: refused, not leaked
  }};
  reactor r{testing::driven(true)};
  rp = &r;
  ASSERT_TRUE(r.start());
  r.recv(first, s.fd[0], buf);
  r.stop();
  r.run();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0], -ECANCELED);
  EXPECT_EQ(results[1], -ECANCELED);
}

TEST(reactor_stop, stop_is_idempotent_and_safe_from_several_threads_at_once) {
  const auto before = testing::thread_count();
  for (int round = 0; round < 20; ++round) {
    reactor r;
    ASSERT_TRUE(r.start());
    std::thread a{[&] { r.stop(); }};
    std::thread b{[&] { r.stop(); }};
    r.stop();
    a.join();
    b.join();
    r.stop();
  }
  EXPECT_EQ(testing::thread_count(), before);
}

TEST(reactor_stop, stop_from_a_handler_on_the_reactor_thread_ends_the_loop) {
  reactor r;
  ASSERT_TRUE(r.start());
  std::atomic<bool> ran{false};
  r.post([&] {
    r.stop();  // must not try to join itself
    ran = true;
  });
  while (!ran.load()) std::this_thread::yield();
  r.stop();  // joins
  EXPECT_FALSE(r.post([] {}));
}

TEST(reactor_stop, driven_reactor_finishes_in_run_after_stop_from_another_thread) {
  reactor r{testing::driven(true)};
  ASSERT_TRUE(r.start());
  std::thread t{[&] { r.stop(); }};
  r.run();  // returns once the stop has completed
  t.join();
  EXPECT_FALSE(r.run_once(std::chrono::milliseconds{1}));
}

}  // namespace
}  // namespace vessel::io
