#include "actors/link_receiver.hpp"

#include <gtest/gtest.h>

#include "actors/errc.hpp"
#include "tests/unit/actors/link_test_support.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;
using test::seq_header;

link_receiver_config cfg(std::uint64_t window = 1000, std::uint32_t every = 4,
                         std::uint64_t every_bytes = 1u << 20) {
  link_receiver_config c;
  c.window_bytes = window;
  c.ack_every_frames = every;
  c.ack_every_bytes = every_bytes;
  c.ack_delay = 200us;
  return c;
}

TEST(link_receiver, delivers_in_order_and_tracks_last_seq_seen) {
  link_receiver r{cfg()};
  for (std::uint64_t seq = 1; seq <= 3; ++seq) {
    EXPECT_EQ(r.on_frame(seq_header(seq, 10), 0ns).value(), receive_verdict::deliver);
  }
  EXPECT_EQ(r.last_seq_seen(), 3u);
  EXPECT_EQ(r.held_bytes(), 30u);
  EXPECT_EQ(r.stats().frames_received, 3u);
  EXPECT_EQ(r.stats().bytes_received, 30u);
}

TEST(link_receiver, drops_and_counts_duplicates) {
  link_receiver r{cfg()};
  ASSERT_TRUE(r.on_frame(seq_header(1, 10), 0ns));
  ASSERT_TRUE(r.on_frame(seq_header(2, 10), 0ns));
  EXPECT_EQ(r.on_frame(seq_header(1, 10), 0ns).value(), receive_verdict::duplicate);
  EXPECT_EQ(r.on_frame(seq_header(2, 10), 0ns).value(), receive_verdict::duplicate);
  EXPECT_EQ(r.stats().duplicates_dropped, 2u);
  EXPECT_EQ(r.stats().frames_received, 2u);
  EXPECT_EQ(r.held_bytes(), 20u);  // duplicates are not held
  EXPECT_EQ(r.last_seq_seen(), 2u);
}

TEST(link_receiver, gap_is_a_protocol_error) {
  link_receiver r{cfg()};
  ASSERT_TRUE(r.on_frame(seq_header(1, 10), 0ns));
  auto v = r.on_frame(seq_header(3, 10), 0ns);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error(), errc::link_sequence_gap);
}

TEST(link_receiver, unsequenced_or_control_frame_is_refused) {
  link_receiver r{cfg()};
  EXPECT_EQ(r.on_frame(seq_header(0, 10), 0ns).error(), errc::link_not_reliable);
  wire::frame_header h;
  h.seq = 1;
  h.body = wire::credit_fields{5};
  EXPECT_EQ(r.on_frame(h, 0ns).error(), errc::link_not_reliable);
}

TEST(link_receiver, more_bytes_than_granted_is_a_credit_error) {
  link_receiver r{cfg(100)};
  ASSERT_TRUE(r.on_frame(seq_header(1, 60), 0ns));
  auto v = r.on_frame(seq_header(2, 41), 0ns);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error(), errc::link_credit_exceeded);
  EXPECT_TRUE(r.on_frame(seq_header(2, 40), 0ns));
}

TEST(link_receiver, each_message_is_charged_its_overhead_on_its_first_fragment) {
  link_receiver_config c = cfg(2 * (10 + 100) + 30);
  c.message_overhead = 100;
  link_receiver r{c};
  EXPECT_TRUE(r.on_frame(seq_header(1, 10), 0ns));
  EXPECT_TRUE(r.on_frame(seq_header(2, 10), 0ns));
  EXPECT_EQ(r.held_bytes(), 220u);
  wire::frame_header later = seq_header(3, 30);
  std::get<wire::data_fields>(later.body).fragment_index = 1;
  EXPECT_TRUE(r.on_frame(later, 0ns)) << "a later fragment costs its bytes only";
  auto over = r.on_frame(seq_header(4, 0), 0ns);
  ASSERT_FALSE(over) << "an empty message still costs its overhead";
  EXPECT_EQ(over.error(), errc::link_credit_exceeded);
}

TEST(link_receiver, acks_are_coalesced_by_count) {
  link_receiver r{cfg(1u << 20, 4)};
  int acks = 0;
  for (std::uint64_t seq = 1; seq <= 40; ++seq) {
    ASSERT_TRUE(r.on_frame(seq_header(seq, 1), 0ns));
    if (auto a = r.poll_ack(0ns)) {
      ++acks;
      EXPECT_EQ(a->cumulative_seq, seq);
      EXPECT_EQ(seq % 4, 0u);
    }
  }
  EXPECT_EQ(acks, 10);
  EXPECT_EQ(r.stats().acks_sent, 10u);
}

TEST(link_receiver, acks_are_coalesced_by_bytes) {
  link_receiver r{cfg(1u << 20, 1000, 300)};
  ASSERT_TRUE(r.on_frame(seq_header(1, 200), 0ns));
  EXPECT_FALSE(r.poll_ack(0ns));
  ASSERT_TRUE(r.on_frame(seq_header(2, 200), 0ns));
  auto a = r.poll_ack(0ns);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->cumulative_seq, 2u);
}

TEST(link_receiver, ack_soon_acks_at_once_and_only_what_is_unacked) {
  link_receiver r{cfg(1u << 20, 1000)};
  r.ack_soon();  // nothing unacked: no ack frame owed
  ASSERT_TRUE(r.on_frame(seq_header(1, 100), 0ns));
  EXPECT_FALSE(r.poll_ack(0ns)) << "coalescing as before";
  ASSERT_TRUE(r.on_frame(seq_header(2, 100), 0ns));
  r.ack_soon();  // a large message completed with frame 2
  auto a = r.poll_ack(0ns);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->cumulative_seq, 2u);
  ASSERT_TRUE(r.on_frame(seq_header(3, 100), 0ns));
  EXPECT_FALSE(r.poll_ack(0ns)) << "ack_soon holds for one ack only";
}

TEST(link_receiver, a_lone_frame_is_acked_after_the_delay) {
  link_receiver r{cfg()};
  EXPECT_FALSE(r.ack_deadline());
  ASSERT_TRUE(r.on_frame(seq_header(1, 1), 1000ns));
  ASSERT_TRUE(r.ack_deadline());
  EXPECT_EQ(*r.ack_deadline(), 1000ns + 200us);
  EXPECT_FALSE(r.poll_ack(1000ns + 199us));
  auto a = r.poll_ack(1000ns + 200us);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->cumulative_seq, 1u);
  EXPECT_FALSE(r.poll_ack(1s));  // nothing new: no ack
}

TEST(link_receiver, grants_credit_once_half_the_window_is_consumed) {
  link_receiver r{cfg(1000)};
  for (std::uint64_t seq = 1; seq <= 10; ++seq) ASSERT_TRUE(r.on_frame(seq_header(seq, 100), 0ns));
  EXPECT_EQ(r.allowance(), 0u);
  EXPECT_FALSE(r.on_consumed(499).value());
  auto g = r.on_consumed(1).value();
  ASSERT_TRUE(g);
  EXPECT_EQ(g->bytes, 500u);
  EXPECT_EQ(r.allowance(), 500u);
  EXPECT_EQ(r.stats().credits_granted, 1u);
  EXPECT_EQ(r.on_consumed(501).error(), errc::link_consumed_beyond_received);
}

TEST(link_receiver, reconnect_grant_restores_window_minus_held) {
  link_receiver r{cfg(1000)};
  for (std::uint64_t seq = 1; seq <= 3; ++seq) ASSERT_TRUE(r.on_frame(seq_header(seq, 100), 0ns));
  ASSERT_TRUE(r.on_consumed(100));
  const wire::credit_fields g = r.on_reconnect();
  EXPECT_EQ(g.bytes, 800u);
  EXPECT_EQ(r.allowance(), 800u);
  EXPECT_EQ(r.last_seq_seen(), 3u);
  EXPECT_FALSE(r.poll_ack(1s));  // the hello's last_seq_seen stands for the pending ack
}

}  // namespace
}  // namespace vessel::actors
