// io/tcp_transport on a lendable reactor (caller-driven progress): the socket is read by
// readiness, a borrower reads it itself on its turns, and the reactor thread, taking the loop
// back, waits on the socket again. On a plain reactor it is read so when asked, and a large
// payload lands where its handler wants it. The peer is a plain blocking socket of a socketpair;
// every wait is for an event (a count, a flag), bounded by a deadline.

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "io/errc.hpp"
#include "io/tcp_transport.hpp"
#include "tests/unit/io/reactor_test_support.hpp"
#include "tests/unit/io/tcp_test_support.hpp"
#include "wire/stream_decoder.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;

using testing::lendable;

/// What the transport delivered, and on which side of the lending it ran (loop owner only,
/// except the atomics the test thread polls while the reactor thread holds the loop).
struct lending_recorder final : transport_handler {
  explicit lending_recorder(reactor& r) : owner{r} {}
  void on_frame(const wire::frame_header& h, std::span<const std::byte> payload,
                const buffer_slice&) override {
    seqs.push_back(h.seq);
    intact = intact && std::vector<std::byte>(payload.begin(), payload.end()) ==
                           test::payload_for(h.seq, payload.size());
    if (owner.lent()) {
      ++while_lent;
    } else {
      by_reactor_thread.fetch_add(1, std::memory_order_release);
    }
    if (echo != nullptr) echo_result = echo->send_copy(test::data_header(h.seq, 0), {});
    frames.fetch_add(1, std::memory_order_release);
  }
  void on_writable() override {}
  void on_closed(std::error_code ec) override {
    reason = ec;
    closed.store(true, std::memory_order_release);
  }

  reactor& owner;
  tcp_transport* echo = nullptr;  // when set, each frame's seq is sent back (no payload)
  result<void> echo_result = outcome::success();
  std::vector<std::uint64_t> seqs;
  bool intact = true;
  int while_lent = 0;
  std::atomic<int> by_reactor_thread{0};
  std::atomic<int> frames{0};
  std::atomic<bool> closed{false};
  std::error_code reason;
};

/// Encodes data frame `seq` with a payload of `len` bytes.
std::vector<std::byte> frame_bytes(std::uint64_t seq, std::size_t len) {
  std::vector<std::byte> out;
  wire::frame_encoder enc;
  EXPECT_TRUE(enc.encode_to(test::data_header(seq, len), test::payload_for(seq, len), out));
  return out;
}

/// Runs borrowed turns until `done()`, at most 10 s; true if it held.
template <class Pred>
bool turn_until(reactor& r, Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    r.borrowed_turn();
  }
  return true;
}

/// Waits (not driving the loop) until `done()`, at most 10 s, sleeping between looks so that the
/// reactor thread gets the core.
template <class Pred>
bool eventually(Pred done) {
  return testing::eventually(done, 100us);
}

/// A lendable reactor, a socketpair, and a transport on one end (built by a borrower).
struct lent_pair {
  reactor r{lendable()};
  int peer = -1;
  lending_recorder handler{r};
  std::unique_ptr<tcp_transport> transport;

  lent_pair() {
    EXPECT_TRUE(r.start());
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    peer = fds[1];
    const timeval limit{10, 0};  // a reply that never comes fails the test instead of hanging it
    ::setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    EXPECT_TRUE(r.borrow());
    transport = std::make_unique<tcp_transport>(r, fds[0], handler);
    transport->start();
  }
  ~lent_pair() {
    if (!r.lent() && !r.borrow()) ADD_FAILURE() << "could not borrow the loop to close";
    transport->close();
    turn_until(r, [&] { return handler.closed.load(std::memory_order_acquire); });
    r.give_back(false);
    r.stop();
    if (peer >= 0) ::close(peer);
  }
};

TEST(tcp_lending, a_transport_on_a_lendable_reactor_receives_by_readiness) {
  lent_pair p;
  EXPECT_TRUE(p.transport->receives_by_readiness());

  test::reactor_thread plain;  // not lendable: an io_uring RECV as always
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  lending_recorder h{plain.get()};
  auto t = plain.run([&] { return std::make_unique<tcp_transport>(plain.get(), fds[0], h); });
  EXPECT_FALSE(t->receives_by_readiness());
  tcp_transport_options off;
  off.poll_when_lent = false;
  tcp_transport opted_out{p.r, ::dup(fds[1]), p.handler, off};  // never started
  EXPECT_FALSE(opted_out.receives_by_readiness());
  ::close(fds[1]);
}

/// Takes every payload of place.size() bytes into `place`, split after `head_bytes`.
struct placing_recorder final : transport_handler {
  wire::fragment_place payload_destination(const wire::frame_header& h,
                                           std::span<const std::byte>) override {
    if (h.payload_len != place.size()) return {};
    ++placed;
    return {std::span{place}.first(head_bytes), std::span{place}.subspan(head_bytes)};
  }
  void on_frame(const wire::frame_header& h, std::span<const std::byte> payload,
                const buffer_slice&) override {
    in_place =
        payload.data() == place.data() + head_bytes && payload.size() == place.size() - head_bytes;
    intact = place == test::payload_for(h.seq, place.size());
    frames.fetch_add(1, std::memory_order_release);
  }
  void on_closed(std::error_code) override { closed.store(true, std::memory_order_release); }

  static constexpr std::size_t head_bytes = 16;
  std::vector<std::byte> place = std::vector<std::byte>(std::size_t{256} << 10);
  int placed = 0;
  bool in_place = false;
  bool intact = false;
  std::atomic<int> frames{0};
  std::atomic<bool> closed{false};
};

TEST(tcp_lending, a_plain_reactor_receives_by_readiness_when_asked_and_lands_payloads_in_place) {
  test::reactor_thread plain;  // not lendable
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  placing_recorder h;
  tcp_transport_options options;
  options.receive_by_readiness = true;
  auto t = plain.run([&] {
    auto made = std::make_unique<tcp_transport>(plain.get(), fds[0], h, options);
    made->start();
    return made;
  });
  EXPECT_TRUE(t->receives_by_readiness());
  // The header (and some payload) first, read before the rest is written: had the
  // reactor's first read found most of the payload already here, that part would stay in the
  // decoder's buffer and nothing would be placed (1 run in ~12 when written at once).
  const std::vector<std::byte> frame = frame_bytes(3, h.place.size());
  constexpr std::size_t first_bytes = 4096;  // more than any header
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  ASSERT_TRUE(test::write_all(fds[1], std::span{frame}.first(first_bytes)));
  int unread = 1;
  while ((::ioctl(fds[0], FIONREAD, &unread) != 0 || unread > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(unread, 0) << "the reactor never read the header";
  // The rest is larger than the socket buffer: the writer blocks until the reactor reads.
  std::thread writer{
      [&] { EXPECT_TRUE(test::write_all(fds[1], std::span{frame}.subspan(first_bytes))); }};
  while (h.frames.load(std::memory_order_acquire) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  writer.join();
  ASSERT_EQ(h.frames.load(std::memory_order_acquire), 1);
  plain.run([&] {
    EXPECT_EQ(h.placed, 1);
    EXPECT_TRUE(h.in_place) << "the payload was copied out of the decoder's buffer";
    EXPECT_TRUE(h.intact);
    t->close();
  });
  while (!h.closed.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(h.closed.load(std::memory_order_acquire));
  ::close(fds[1]);
}

TEST(tcp_lending, frames_reach_a_borrower_on_its_own_turns_in_order_and_its_replies_go_out) {
  lent_pair p;
  p.handler.echo = p.transport.get();
  constexpr int frames = 200;
  wire::stream_decoder dec{tcp_transport_options::default_limits()};  // the echoes
  for (int i = 1; i <= frames; ++i) {
    // Sizes from empty to larger than one read, so frames also straddle reads.
    const std::size_t len = static_cast<std::size_t>(i % 7 == 0 ? 100'000 : i * 13 % 900);
    ASSERT_TRUE(test::write_all(p.peer, frame_bytes(static_cast<std::uint64_t>(i), len)));
    ASSERT_TRUE(turn_until(p.r, [&] { return p.handler.frames.load() == i; })) << "frame " << i;
    // The echo: the borrower's send went out on its own turn.
    ASSERT_TRUE(p.handler.echo_result) << p.handler.echo_result.error().message();
    bool got = false;
    while (!got) {
      auto space = dec.prepare();
      const auto n = ::recv(p.peer, space.data(), space.size(), 0);
      ASSERT_GT(n, 0);
      dec.commit(static_cast<std::size_t>(n));
      auto next = dec.next();
      ASSERT_TRUE(next);
      if (next.value()) {
        EXPECT_EQ(next.value()->header.seq, static_cast<std::uint64_t>(i));
        EXPECT_EQ(next.value()->payload.size(), 0u);
        got = true;
      }
    }
  }
  EXPECT_TRUE(p.r.lent());
  EXPECT_EQ(p.handler.while_lent, frames);  // none waited for the reactor thread
  EXPECT_EQ(p.handler.by_reactor_thread.load(), 0);
  EXPECT_TRUE(p.handler.intact);
  for (int i = 0; i < frames; ++i) EXPECT_EQ(p.handler.seqs[i], static_cast<std::uint64_t>(i + 1));
}

// With two sockets or more, a borrowed turn asks the kernel about all of them in one poll(2) and
// reads only those with input (reactor::run_pollers; a recv(2) costs ~1.2 µs on a PVM guest, and
// a waiting rank with three links spent three per turn, most of them EAGAIN). Frames still reach
// their transport in order on the borrower's turns, a close is still seen, and with a single
// socket a turn asks nothing (its own read is the cheapest look).
TEST(tcp_lending, a_borrower_asks_once_per_turn_about_all_its_sockets) {
  lent_pair p;
  const std::uint64_t alone = p.r.readiness_checks();
  for (int i = 0; i < 10; ++i) p.r.borrowed_turn();
  EXPECT_EQ(p.r.readiness_checks(), alone);

  constexpr int others = 2;
  std::vector<int> peers;
  std::vector<std::unique_ptr<lending_recorder>> handlers;
  std::vector<std::unique_ptr<tcp_transport>> transports;
  for (int i = 0; i < others; ++i) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    peers.push_back(fds[1]);
    handlers.push_back(std::make_unique<lending_recorder>(p.r));
    transports.push_back(std::make_unique<tcp_transport>(p.r, fds[0], *handlers.back()));
    transports.back()->start();
  }
  const std::uint64_t before = p.r.readiness_checks();
  for (int i = 0; i < 10; ++i) p.r.borrowed_turn();
  EXPECT_EQ(p.r.readiness_checks() - before, 10u);

  // Input on one socket reaches its transport alone, in order, each frame on a borrowed turn.
  constexpr int frames = 40;
  for (int i = 1; i <= frames; ++i) {
    const std::size_t len = static_cast<std::size_t>(i % 9 == 0 ? 70'000 : i * 29 % 700);
    ASSERT_TRUE(test::write_all(peers[1], frame_bytes(static_cast<std::uint64_t>(i), len)));
    ASSERT_TRUE(turn_until(p.r, [&] { return handlers[1]->frames.load() == i; })) << "frame " << i;
  }
  EXPECT_EQ(handlers[1]->while_lent, frames);
  EXPECT_TRUE(handlers[1]->intact);
  for (int i = 0; i < frames; ++i) {
    EXPECT_EQ(handlers[1]->seqs[i], static_cast<std::uint64_t>(i + 1));
  }
  EXPECT_EQ(p.handler.frames.load(), 0);
  EXPECT_EQ(handlers[0]->frames.load(), 0);

  // A peer that closes: poll(2) reports the hang-up, and the borrower's read ends the transport.
  ::close(peers[0]);
  peers[0] = -1;
  ASSERT_TRUE(turn_until(p.r, [&] { return handlers[0]->closed.load(); }));
  EXPECT_EQ(handlers[0]->reason, make_error_code(errc::connection_closed));
  EXPECT_FALSE(p.handler.closed.load());
  EXPECT_FALSE(handlers[1]->closed.load());

  transports[1]->close();
  ASSERT_TRUE(turn_until(p.r, [&] { return handlers[1]->closed.load(); }));
  ::close(peers[1]);
}

// peer_link::transmit corks the transport around a message's fragments: what is sent meanwhile
// stays queued, and uncork() writes it all, in order; uncorked, a send goes at once.
TEST(tcp_lending, sends_between_cork_and_uncork_leave_together_in_order) {
  lent_pair p;
  auto unread = [&] {
    int n = -1;
    EXPECT_EQ(::ioctl(p.peer, FIONREAD, &n), 0);
    return n;
  };
  constexpr std::uint64_t frames = 3;
  p.transport->cork();
  for (std::uint64_t seq = 1; seq <= frames; ++seq) {
    ASSERT_TRUE(p.transport->send_copy(test::data_header(seq, 100), test::payload_for(seq, 100)));
  }
  EXPECT_EQ(unread(), 0) << "a corked send was written at once";
  EXPECT_GT(p.transport->queued_bytes(), 0u);
  p.transport->uncork();
  EXPECT_EQ(p.transport->queued_bytes(), 0u);
  wire::stream_decoder dec{tcp_transport_options::default_limits()};
  for (std::uint64_t want = 1; want <= frames;) {
    auto next = dec.next();
    ASSERT_TRUE(next);
    if (next.value()) {
      EXPECT_EQ(next.value()->header.seq, want);
      EXPECT_EQ(std::vector<std::byte>(next.value()->payload.begin(), next.value()->payload.end()),
                test::payload_for(want, 100));
      ++want;
      continue;
    }
    auto space = dec.prepare();
    const auto n = ::recv(p.peer, space.data(), space.size(), 0);  // SO_RCVTIMEO bounds it
    ASSERT_GT(n, 0) << "frame " << want << " never left";
    dec.commit(static_cast<std::size_t>(n));
  }
  ASSERT_TRUE(p.transport->send_copy(test::data_header(frames + 1, 0), {}));
  EXPECT_GT(unread(), 0) << "an uncorked send waited";
}

TEST(tcp_lending, the_reactor_thread_reads_again_once_it_has_the_loop_back) {
  lent_pair p;
  ASSERT_TRUE(test::write_all(p.peer, frame_bytes(1, 10)));
  ASSERT_TRUE(turn_until(p.r, [&] { return p.handler.frames.load() == 1; }));
  p.r.give_back(false);  // the reactor thread takes the loop now and waits on the socket
  for (int i = 2; i <= 20; ++i) {
    ASSERT_TRUE(test::write_all(p.peer, frame_bytes(static_cast<std::uint64_t>(i), 64)));
    ASSERT_TRUE(eventually([&] { return p.handler.frames.load(std::memory_order_acquire) == i; }))
        << "frame " << i << " never read by the reactor thread";
  }
  EXPECT_EQ(p.handler.by_reactor_thread.load(std::memory_order_acquire), 19);
  // And a borrower again, after the reactor thread held the loop.
  ASSERT_TRUE(eventually([&] { return p.r.borrow(); }));
  ASSERT_TRUE(test::write_all(p.peer, frame_bytes(21, 64)));
  ASSERT_TRUE(turn_until(p.r, [&] { return p.handler.frames.load() == 21; }));
  EXPECT_EQ(p.handler.while_lent, 2);
  EXPECT_TRUE(p.handler.intact);
}

TEST(tcp_lending, a_peer_that_closes_while_the_loop_is_lent_ends_with_connection_closed) {
  lent_pair p;
  ASSERT_TRUE(test::write_all(p.peer, frame_bytes(1, 32)));
  ASSERT_TRUE(test::write_all(p.peer, frame_bytes(2, 32)));
  ::close(p.peer);
  p.peer = -1;
  ASSERT_TRUE(turn_until(p.r, [&] { return p.handler.closed.load(); }));
  EXPECT_EQ(p.handler.frames.load(), 2);  // what came before the close is delivered first
  EXPECT_EQ(p.handler.reason, make_error_code(errc::connection_closed));
  EXPECT_TRUE(p.r.lent());
}

// A send that fails while the loop is lent (the peer is gone) leaves no op in flight whose
// completion would end the close: the borrower's next turns, or the reactor thread taking the
// loop back, must end it. Before, the transport stayed "closing" and never said on_closed, and a
// mesh link kept its dead connection until the peer-silence deadline (10 s) took the link down.
TEST(tcp_lending, a_send_that_fails_while_the_loop_is_lent_ends_the_transport) {
  lent_pair p;
  ::close(p.peer);
  p.peer = -1;
  // No turn ran since the close: the send, not a read, finds the peer gone.
  EXPECT_TRUE(p.transport->send_copy(test::data_header(1, 0), {}));
  ASSERT_TRUE(turn_until(p.r, [&] { return p.handler.closed.load(); }))
      << "no on_closed after the failed send";
  EXPECT_EQ(p.handler.reason, make_error_code(errc::connection_reset)) << p.handler.reason.message();
}

TEST(tcp_lending, a_send_that_failed_while_lent_is_ended_by_the_reactor_thread_taking_the_loop_back) {
  lent_pair p;
  ::close(p.peer);
  p.peer = -1;
  EXPECT_TRUE(p.transport->send_copy(test::data_header(1, 0), {}));
  p.r.give_back(false);
  EXPECT_TRUE(eventually([&] { return p.handler.closed.load(std::memory_order_acquire); }))
      << "the reactor thread never ended the close";
}

}  // namespace
}  // namespace vessel::io
