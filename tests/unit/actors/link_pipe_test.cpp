// A sender and a receiver state machine joined by a simulated ordered, lossless pipe that can be
// cut at any point (everything in flight is lost), then reconnected the way a link does it:
// the receiver's last_seq_seen goes to the sender's resume(), and the receiver's fresh grant
// follows. Properties: exactly-once in-order delivery, bounded memory, coalesced acks.

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "actors/errc.hpp"
#include "actors/link_receiver.hpp"
#include "actors/link_sender.hpp"
#include "tests/unit/actors/link_test_support.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

/// One direction of data (a -> b) with b's acks and grants flowing back.
struct simulated_link {
  simulated_link(const link_sender_config& sc, const link_receiver_config& rc)
      : pool{pool_config()}, sender{sc}, receiver{rc} {}

  static io::buffer_pool_config pool_config() {
    io::buffer_pool_config c;
    c.classes = {{4096, 8192}};  // more than the window's worth of the smallest payloads
    c.populate = false;
    return c;
  }

  /// Hands out at most `n` frames the sender allows onto the a -> b pipe.
  void transmit(int n) {
    for (int i = 0; i < n; ++i) {
      const outgoing_frame* f = sender.next_transmit();
      if (f == nullptr) return;
      to_b.push_back(*f);
    }
  }

  /// Delivers at most `n` frames from the pipe to the receiver; acks go back as due.
  void deliver(int n) {
    for (int i = 0; i < n && !to_b.empty(); ++i) {
      outgoing_frame f = std::move(to_b.front());
      to_b.pop_front();
      auto verdict = receiver.on_frame(f.header, now);
      ASSERT_TRUE(verdict) << verdict.error().message() << " at seq " << f.header.seq;
      if (verdict.value() == receive_verdict::deliver) {
        std::uint64_t stamp = 0;
        std::memcpy(&stamp, f.payload.data(), sizeof stamp);
        ASSERT_EQ(stamp, next_expected) << "out of order or lost";
        ASSERT_EQ(f.payload.size(), sizes[next_expected]);
        ++next_expected;
        app.push_back(std::move(f.payload));
      }
      poll_ack();
    }
  }

  void poll_ack() {
    if (auto ack = receiver.poll_ack(now)) to_a.emplace_back(*ack);
  }

  /// The app consumes at most `n` delivered payloads; grants go back as due.
  void consume(int n) {
    for (int i = 0; i < n && !app.empty(); ++i) {
      const std::size_t len = app.front().size();
      app.pop_front();
      auto grant = receiver.on_consumed(len);
      ASSERT_TRUE(grant);
      if (grant.value()) to_a.emplace_back(*grant.value());
    }
  }

  /// Delivers at most `n` acks and grants to the sender.
  void feed_back(int n) {
    for (int i = 0; i < n && !to_a.empty(); ++i) {
      auto control = to_a.front();
      to_a.pop_front();
      if (auto* ack = std::get_if<wire::ack_fields>(&control)) {
        auto r = sender.on_ack(ack->cumulative_seq);
        ASSERT_TRUE(r) << r.error().message();
      } else {
        ASSERT_TRUE(sender.on_credit(std::get<wire::credit_fields>(control).bytes));
      }
    }
  }

  /// Drops everything in flight and reconnects; `hello_seq` is what the receiver's hello says
  /// (its last_seq_seen, or an older value when the hello was taken before the last frames).
  void cut_and_reconnect(std::uint64_t hello_seq) {
    to_b.clear();
    to_a.clear();
    ASSERT_TRUE(sender.resume(hello_seq));
    to_a.emplace_back(receiver.on_reconnect());
    ++cuts;
  }

  void check_bounds() const {
    const link_sender_config& c = sender.config();
    ASSERT_LE(sender.buffered_bytes(), c.max_buffered_bytes);
    ASSERT_LE(sender.unacked_frames(), c.max_unacked_frames);
    ASSERT_LE(sender.unacked_frames() + sender.queued_frames(),
              c.max_unacked_frames + c.max_queued_frames);
  }

  io::buffer_pool pool;
  link_sender sender;
  link_receiver receiver;
  std::deque<outgoing_frame> to_b;
  std::deque<std::variant<wire::ack_fields, wire::credit_fields>> to_a;
  std::deque<io::buffer_slice> app;
  std::vector<std::size_t> sizes;
  std::uint64_t next_expected = 0;
  link_time now{};
  int cuts = 0;
};

link_sender_config sender_config() {
  link_sender_config c;
  c.max_unacked_frames = 64;
  c.max_queued_frames = 64;
  c.max_buffered_bytes = 256u << 10;
  c.initial_credit = 128u << 10;
  return c;
}

link_receiver_config receiver_config() {
  link_receiver_config c;
  c.window_bytes = 128u << 10;
  c.ack_every_frames = 16;
  c.ack_every_bytes = 32u << 10;
  c.ack_delay = 200us;
  return c;
}

TEST(link_pipe, every_message_arrives_exactly_once_in_order_across_random_cuts) {
  constexpr std::size_t messages = 10'000;
  simulated_link link{sender_config(), receiver_config()};
  std::mt19937_64 rng{20261129};
  std::uniform_int_distribution<std::size_t> size_dist{8, 4096};
  for (std::size_t i = 0; i < messages; ++i) link.sizes.push_back(size_dist(rng));
  std::uniform_int_distribution<int> burst{0, 8};
  std::uniform_int_distribution<int> action{0, 999};

  std::size_t submitted = 0;
  std::uint64_t pushed_back = 0;
  for (int step = 0; link.next_expected < messages; ++step) {
    ASSERT_LT(step, 2'000'000) << "no progress";
    link.now += 1us;
    for (int n = burst(rng); n > 0 && submitted < messages; --n) {
      auto r = link.sender.submit(test::data_header(submitted),
                                  test::payload(link.pool, link.sizes[submitted], submitted));
      if (!r) {
        ASSERT_EQ(r.error(), errc::link_would_block);
        ++pushed_back;
        break;  // the caller holds on to the message and retries later
      }
      ++submitted;
    }
    link.transmit(burst(rng));
    link.deliver(burst(rng));
    link.poll_ack();  // the delayed-ack timer
    link.consume(burst(rng));
    link.feed_back(burst(rng));
    link.check_bounds();
    if (HasFatalFailure()) return;
    if (action(rng) < 10) {  // a cut every ~100 steps
      // Half the hellos are stale: the frames after them arrive again and must be dropped.
      std::uint64_t hello = link.receiver.last_seq_seen();
      if (action(rng) < 500) {
        std::uniform_int_distribution<std::uint64_t> older{link.sender.acked_seq(), hello};
        hello = older(rng);
      }
      link.cut_and_reconnect(hello);
      if (HasFatalFailure()) return;
    }
  }
  RecordProperty("cuts", link.cuts);
  RecordProperty("retransmits", static_cast<int>(link.sender.stats().retransmits));
  RecordProperty("duplicates_dropped", static_cast<int>(link.receiver.stats().duplicates_dropped));
  RecordProperty("acks_sent", static_cast<int>(link.receiver.stats().acks_sent));
  RecordProperty("credit_stalls", static_cast<int>(link.sender.stats().credit_stalls));
  RecordProperty("pushed_back", static_cast<int>(pushed_back));
  EXPECT_EQ(link.next_expected, messages);
  EXPECT_EQ(link.receiver.stats().frames_received, messages);
  EXPECT_GT(link.cuts, 10);
  EXPECT_GT(link.sender.stats().retransmits, 0u);
  EXPECT_GT(link.receiver.stats().duplicates_dropped, 0u);
  EXPECT_GT(pushed_back, 0u);
  // Acks are coalesced: far fewer than frames.
  EXPECT_LT(link.receiver.stats().acks_sent * 4, link.receiver.stats().frames_received);
}

TEST(link_pipe, a_receiver_that_never_consumes_bounds_the_sender_memory) {
  simulated_link link{sender_config(), receiver_config()};
  link.sizes.assign(100'000, 1000);
  std::size_t submitted = 0;
  int pushed_back = 0;
  for (int step = 0; step < 5'000; ++step) {
    link.now += 1us;
    auto r = link.sender.submit(test::data_header(), test::payload(link.pool, 1000, submitted));
    if (r) {
      ++submitted;
    } else {
      ASSERT_EQ(r.error(), errc::link_would_block);
      ++pushed_back;
    }
    link.transmit(4);
    link.deliver(4);
    link.poll_ack();
    link.feed_back(4);
    link.check_bounds();
    ASSERT_LE(link.receiver.held_bytes(), receiver_config().window_bytes);
    if (HasFatalFailure()) return;
  }
  // The receiver holds a full window and nothing more; the sender queued up to its bound and
  // then pushed back on every call.
  EXPECT_EQ(link.receiver.held_bytes(), 131'000u);
  EXPECT_GT(link.sender.stats().credit_stalls, 0u);
  EXPECT_GT(pushed_back, 4'000);
  EXPECT_LE(link.sender.buffered_bytes(), sender_config().max_buffered_bytes);
  EXPECT_FALSE(link.sender.writable(1000));

  // The app wakes up: consuming drains the backlog and room comes back.
  for (int step = 0; step < 1'000; ++step) {
    link.now += 1us;
    link.consume(8);
    link.feed_back(8);
    link.transmit(8);
    link.deliver(8);
    link.poll_ack();
    link.feed_back(8);
    if (HasFatalFailure()) return;
  }
  EXPECT_TRUE(link.sender.writable(1000));
  EXPECT_EQ(link.next_expected, submitted);
  EXPECT_EQ(link.sender.buffered_bytes(), 0u);
}

TEST(link_pipe, credit_exhaustion_queues_then_pushes_back) {
  link_sender_config sc = sender_config();
  sc.initial_credit = 10'000;
  link_receiver_config rc = receiver_config();
  rc.window_bytes = 10'000;
  sc.max_queued_frames = 5;
  sc.max_buffered_bytes = 1u << 20;
  simulated_link link{sc, rc};
  int sendable = 0;
  int queued = 0;
  for (int i = 0; i < 15; ++i) {
    auto r = link.sender.submit(test::data_header(), test::payload(link.pool, 1000, i));
    ASSERT_TRUE(r);
    (r.value() == submit_outcome::sendable ? sendable : queued) += 1;
  }
  EXPECT_EQ(sendable, 10);
  EXPECT_EQ(queued, 5);
  EXPECT_EQ(link.sender.stats().credit_stalls, 1u);
  link.transmit(100);
  EXPECT_EQ(link.to_b.size(), 10u);
  // The frames bound (64 unacked + 5 queued) is what pushes back now: 15 are held, 54 fit.
  int accepted = 0;
  while (link.sender.submit(test::data_header(), test::payload(link.pool, 10, 0))) ++accepted;
  EXPECT_EQ(accepted, 64 + 5 - 15);
  EXPECT_EQ(link.sender.stats().would_block, 1u);
}

TEST(link_pipe, ack_beyond_sent_over_the_pipe_is_typed) {
  simulated_link link{sender_config(), receiver_config()};
  ASSERT_TRUE(link.sender.submit(test::data_header(), test::payload(link.pool, 10, 0)));
  link.transmit(1);
  auto r = link.sender.on_ack(2);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::link_ack_beyond_sent);
  EXPECT_EQ(std::error_code{r.error()}.category().name(), std::string{"vessel.actors"});
}

}  // namespace
}  // namespace vessel::actors
