// io/tcp_transport on a busy-polling reactor (reactor_config::busy_poll, not lendable): while the
// reactor thread spins it reads a socket received by readiness itself, with no io_uring poll
// armed; once it stops spinning it arms the poll before it sleeps, so input that comes while it
// sleeps still wakes it. Driven-mode reactor on the test thread; the peer is a plain socket.

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "io/errc.hpp"
#include "io/tcp_transport.hpp"
#include "tests/unit/io/reactor_test_support.hpp"
#include "tests/unit/io/tcp_test_support.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;

struct frame_recorder final : transport_handler {
  void on_frame(const wire::frame_header& h, std::span<const std::byte> payload,
                const buffer_slice&) override {
    seqs.push_back(h.seq);
    intact = intact && std::vector<std::byte>(payload.begin(), payload.end()) ==
                           test::payload_for(h.seq, payload.size());
  }
  void on_closed(std::error_code ec) override {
    closed = true;
    reason = ec;
  }

  std::vector<std::uint64_t> seqs;
  bool intact = true;
  bool closed = false;
  std::error_code reason;
};

/// Drives `r` until `done()`, at most 10 s, each turn allowed to wait `turn` (a turn spins only
/// when it may wait as long as the busy-poll window).
template <class Pred>
bool drive_until(reactor& r, Pred done, std::chrono::nanoseconds turn) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    r.run_once(turn);
  }
  return true;
}

std::vector<std::byte> frame_bytes(std::uint64_t seq, std::size_t len) {
  std::vector<std::byte> out;
  wire::frame_encoder enc;
  EXPECT_TRUE(enc.encode_to(test::data_header(seq, len), test::payload_for(seq, len), out));
  return out;
}

/// A driven reactor that busy-polls for `window`, and a transport received by readiness on one
/// end of a socketpair.
struct spinning_pair {
  explicit spinning_pair(std::chrono::nanoseconds window)
      : r{config(window)}, turn{std::max<std::chrono::nanoseconds>(window, 10ms)} {
    EXPECT_TRUE(r.start());
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    peer = fds[1];
    tcp_transport_options options;
    options.receive_by_readiness = true;
    transport = std::make_unique<tcp_transport>(r, fds[0], handler, options);
    transport->start();
  }
  ~spinning_pair() {
    if (!handler.closed) transport->close();
    EXPECT_TRUE(drive_until(
        r, [&] { return handler.closed; }, turn));
    transport.reset();
    r.stop();
    r.run();
    if (peer >= 0) ::close(peer);
  }

  static reactor_config config(std::chrono::nanoseconds window) {
    auto c = testing::driven(true);
    c.busy_poll = window;
    return c;
  }

  bool send(std::uint64_t seq, std::size_t len) {
    return test::write_all(peer, frame_bytes(seq, len));
  }
  bool frames_in(std::size_t n) {
    return drive_until(
        r, [&] { return handler.seqs.size() >= n; }, turn);
  }
  /// Frames 1..n of 8 bytes, each read before the next is sent: the first by the poll armed at
  /// start, the rest by the spin (the reactor spin-polls from then on).
  bool exchange_small_frames(std::uint64_t n) {
    for (std::uint64_t seq = 1; seq <= n; ++seq) {
      if (!send(seq, 8) || !frames_in(seq)) return false;
    }
    return true;
  }

  reactor r;
  std::chrono::nanoseconds turn;
  int peer = -1;
  frame_recorder handler;
  std::unique_ptr<tcp_transport> transport;
};

TEST(tcp_spin_poll, a_spinning_reactor_reads_the_socket_itself_with_nothing_armed) {
  spinning_pair p{200ms};
  EXPECT_EQ(p.r.ops_in_flight(), 1u) << "the readiness poll of a reactor that has not spun yet";
  ASSERT_TRUE(p.send(1, 8));
  ASSERT_TRUE(p.frames_in(1));  // by the poll armed before the spin began
  for (std::uint64_t seq = 2; seq <= 50; ++seq) {
    ASSERT_TRUE(p.send(seq, seq * 13));
    ASSERT_TRUE(p.frames_in(seq));
    EXPECT_EQ(p.r.ops_in_flight(), 0u) << "frame " << seq << ": a poll was armed while spinning";
  }
  EXPECT_TRUE(p.handler.intact);
  std::vector<std::uint64_t> expected(50);
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = i + 1;
  EXPECT_EQ(p.handler.seqs, expected);
}

// More than one spin's reads (16 reads a visit, a header alone after large frames): the spin comes
// back for the rest.
TEST(tcp_spin_poll, a_burst_larger_than_one_visit_arrives_whole_and_in_order) {
  spinning_pair p{200ms};
  ASSERT_TRUE(p.exchange_small_frames(1));
  constexpr std::uint64_t burst = 200;
  std::thread writer{[&] {
    for (std::uint64_t seq = 2; seq <= burst; ++seq) {
      EXPECT_TRUE(p.send(seq, seq % 3 == 0 ? std::size_t{40} << 10 : seq));
    }
  }};
  const bool all = p.frames_in(burst);
  writer.join();
  ASSERT_TRUE(all) << p.handler.seqs.size() << " of " << burst;
  EXPECT_TRUE(p.handler.intact);
  for (std::size_t i = 0; i < p.handler.seqs.size(); ++i) EXPECT_EQ(p.handler.seqs[i], i + 1);
}

// Idle, the reactor stops spinning and sleeps with the poll armed: a frame written while it sleeps
// wakes it, and it is read by the poll's completion.
TEST(tcp_spin_poll, a_reactor_that_stops_spinning_arms_the_poll_and_wakes_for_input) {
  spinning_pair p{5ms};
  ASSERT_TRUE(p.exchange_small_frames(2));
  for (int i = 0; i < 10; ++i) p.r.run_once(10ms);  // fruitless spins: spinning goes off
  EXPECT_EQ(p.r.ops_in_flight(), 1u) << "the reactor sleeps with no poll on the socket";
  std::thread writer{[&] {
    std::this_thread::sleep_for(50ms);  // the reactor sleeps by then (its wait is 5 s)
    EXPECT_TRUE(p.send(3, 100));
  }};
  const auto t0 = std::chrono::steady_clock::now();
  while (p.handler.seqs.size() < 3 && std::chrono::steady_clock::now() - t0 < 10s) {
    p.r.run_once(5s);
  }
  writer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s) << "the sleeping reactor missed the frame";
  ASSERT_EQ(p.handler.seqs.size(), 3u);
  EXPECT_TRUE(p.handler.intact);
}

// Another spinner on the reactor thread (an shm transport waiting for its ring: io/shm_transport's
// spin_for_frames) asks work_waiting() between its pauses. While the reactor spin-polls, no poll is
// armed on the socket, so no completion tells of a frame: work_waiting() reads the socket itself
// now and then, and the spinner gives way at once instead of spinning out its budget.
TEST(tcp_spin_poll, a_frame_that_comes_during_another_spin_on_the_thread_ends_that_spin) {
  spinning_pair p{200ms};
  ASSERT_TRUE(p.exchange_small_frames(2));
  ASSERT_EQ(p.r.ops_in_flight(), 0u) << "not spin-polling: the test would prove nothing";
  constexpr auto spin_budget = 3s;
  std::chrono::steady_clock::duration spun{};
  std::size_t frames_when_it_ended = 0;
  bool spun_once = false;
  ASSERT_TRUE(p.r.post([&] {
    const auto t0 = std::chrono::steady_clock::now();
    while (!p.r.work_waiting() && std::chrono::steady_clock::now() - t0 < spin_budget) {
    }
    spun = std::chrono::steady_clock::now() - t0;
    frames_when_it_ended = p.handler.seqs.size();
    spun_once = true;
  }));
  std::thread writer{[&] {
    std::this_thread::sleep_for(50ms);  // the spinner spins by then
    EXPECT_TRUE(p.send(3, 100));
  }};
  ASSERT_TRUE(drive_until(
      p.r, [&] { return spun_once; }, p.turn));
  writer.join();
  EXPECT_LT(spun, 1s) << "the spinner spun out its budget: the frame went unseen";
  EXPECT_EQ(frames_when_it_ended, 3u);
  ASSERT_TRUE(p.frames_in(3));
  EXPECT_TRUE(p.handler.intact);
}

// The peer goes while the reactor spins: the spin's read sees the end and closes the transport.
TEST(tcp_spin_poll, a_peer_that_closes_while_the_reactor_spins_ends_the_transport) {
  spinning_pair p{200ms};
  ASSERT_TRUE(p.exchange_small_frames(2));
  ::close(p.peer);
  p.peer = -1;
  ASSERT_TRUE(drive_until(
      p.r, [&] { return p.handler.closed; }, p.turn));
  EXPECT_EQ(p.handler.reason, make_error_code(errc::connection_closed));
  EXPECT_EQ(p.r.ops_in_flight(), 0u);
}

}  // namespace
}  // namespace vessel::io
