#include "actors/link_sender.hpp"

#include <gtest/gtest.h>

#include "actors/errc.hpp"
#include "tests/unit/actors/link_test_support.hpp"

namespace vessel::actors {
namespace {

using test::data_header;
using test::payload;

link_sender_config cfg(std::uint64_t credit, std::size_t window = 8, std::size_t queued = 8,
                       std::size_t bound = 1u << 20) {
  link_sender_config c;
  c.initial_credit = credit;
  c.max_unacked_frames = window;
  c.max_queued_frames = queued;
  c.max_buffered_bytes = bound;
  return c;
}

TEST(link_sender, assigns_consecutive_seqs_from_one) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(1u << 20)};
  for (std::uint64_t i = 1; i <= 5; ++i) {
    ASSERT_EQ(s.submit(data_header(), payload(pool, 100)).value(), submit_outcome::sendable);
    const outgoing_frame* f = s.next_transmit();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->header.seq, i);
    EXPECT_EQ(f->header.payload_len, 100u);
  }
  EXPECT_EQ(s.next_transmit(), nullptr);
  EXPECT_EQ(s.stats().frames_sent, 5u);
  EXPECT_EQ(s.stats().bytes_sent, 500u);
}

TEST(link_sender, dropping_payloads_releases_every_kept_and_queued_buffer) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(100)};  // credit for one frame: the second stays queued
  io::buffer_slice sent = payload(pool, 64, 1);
  io::buffer_slice queued = payload(pool, 64, 2);
  ASSERT_TRUE(s.submit(data_header(), sent));
  ASSERT_NE(s.next_transmit(), nullptr);
  ASSERT_EQ(s.submit(data_header(), queued).value(), submit_outcome::queued);
  EXPECT_EQ(sent.owner().use_count(), 2u);
  EXPECT_EQ(queued.owner().use_count(), 2u);
  s.drop_payloads();  // the link went down for good: nothing is ever resent
  EXPECT_EQ(sent.owner().use_count(), 1u);
  EXPECT_EQ(queued.owner().use_count(), 1u);
}

TEST(link_sender, keeps_unacked_payload_without_copy_until_cumulative_ack) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(1u << 20)};
  io::buffer_slice p = payload(pool, 64, 42);
  const std::byte* data = p.data();
  ASSERT_TRUE(s.submit(data_header(), p));
  const outgoing_frame* f = s.next_transmit();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->payload.data(), data);  // the same block, shared
  EXPECT_EQ(p.owner().use_count(), 2u);
  ASSERT_TRUE(s.submit(data_header(), payload(pool, 64)));
  ASSERT_NE(s.next_transmit(), nullptr);
  EXPECT_EQ(s.on_ack(1).value(), 1u);
  EXPECT_EQ(p.owner().use_count(), 1u);  // released by the ack
  EXPECT_EQ(s.unacked_frames(), 1u);
  EXPECT_EQ(s.buffered_bytes(), 64u);
  EXPECT_EQ(pool.stats(0).in_use, 2u);  // ours, and the second frame's kept by the sender
  EXPECT_EQ(s.on_ack(2).value(), 1u);
  EXPECT_EQ(s.buffered_bytes(), 0u);
  p.reset();
  EXPECT_EQ(pool.stats(0).in_use, 0u);
}

TEST(link_sender, queues_when_out_of_credit_and_releases_on_grant) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(250)};
  EXPECT_EQ(s.submit(data_header(), payload(pool, 100)).value(), submit_outcome::sendable);
  EXPECT_EQ(s.submit(data_header(), payload(pool, 100)).value(), submit_outcome::sendable);
  EXPECT_EQ(s.submit(data_header(), payload(pool, 100)).value(), submit_outcome::queued);
  EXPECT_EQ(s.stats().credit_stalls, 1u);
  ASSERT_NE(s.next_transmit(), nullptr);
  ASSERT_NE(s.next_transmit(), nullptr);
  EXPECT_EQ(s.next_transmit(), nullptr);
  EXPECT_EQ(s.credit(), 50u);
  EXPECT_EQ(s.queued_frames(), 1u);
  ASSERT_TRUE(s.on_credit(50));
  const outgoing_frame* f = s.next_transmit();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->header.seq, 3u);
  EXPECT_EQ(s.credit(), 0u);
  EXPECT_EQ(s.stats().credit_stalls, 1u);  // one episode
}

// Each message also costs message_overhead, charged with its first fragment only: ten 8-byte
// messages do not fit where 100 bytes of payload would.
TEST(link_sender, each_message_costs_its_overhead_once_on_its_first_fragment) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender_config c = cfg(2 * (8 + 100));
  c.message_overhead = 100;
  link_sender s{c};
  EXPECT_EQ(s.submit(data_header(), payload(pool, 8)).value(), submit_outcome::sendable);
  EXPECT_EQ(s.submit(data_header(), payload(pool, 8)).value(), submit_outcome::sendable);
  EXPECT_EQ(s.submit(data_header(), payload(pool, 8)).value(), submit_outcome::queued);
  ASSERT_NE(s.next_transmit(), nullptr);
  ASSERT_NE(s.next_transmit(), nullptr);
  EXPECT_EQ(s.next_transmit(), nullptr);
  EXPECT_EQ(s.credit(), 0u);
  ASSERT_TRUE(s.on_credit(108 + 50));
  ASSERT_NE(s.next_transmit(), nullptr);
  EXPECT_EQ(s.credit(), 50u);

  // A later fragment of a message carries no overhead: 50 bytes of credit send 50 bytes of it.
  wire::frame_header second = data_header();
  std::get<wire::data_fields>(second.body).fragment_index = 1;
  EXPECT_EQ(s.submit(second, payload(pool, 50)).value(), submit_outcome::sendable);
  ASSERT_NE(s.next_transmit(), nullptr);
  EXPECT_EQ(s.credit(), 0u);
}

TEST(link_sender, pushes_back_beyond_the_queue_bound_and_signals_room) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(0, 2, 2)};  // no credit at all: everything queues
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s.submit(data_header(), payload(pool, 10)).value(), submit_outcome::queued);
  }
  auto r = s.submit(data_header(), payload(pool, 10));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::link_would_block);
  EXPECT_FALSE(s.writable(10));
  EXPECT_FALSE(s.take_writable_signal());
  EXPECT_EQ(s.stats().would_block, 1u);
  ASSERT_TRUE(s.on_credit(20));
  ASSERT_NE(s.next_transmit(), nullptr);
  ASSERT_NE(s.next_transmit(), nullptr);
  EXPECT_FALSE(s.take_writable_signal());
  ASSERT_EQ(s.on_ack(1).value(), 1u);
  EXPECT_TRUE(s.take_writable_signal());
  EXPECT_FALSE(s.take_writable_signal());  // once
  EXPECT_TRUE(s.submit(data_header(), payload(pool, 10)));
}

TEST(link_sender, pushes_back_beyond_the_byte_bound) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(1u << 20, 64, 64, 1000)};
  ASSERT_TRUE(s.submit(data_header(), payload(pool, 600)));
  auto r = s.submit(data_header(), payload(pool, 600));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::link_would_block);
  EXPECT_TRUE(s.writable(400));
  auto big = s.submit(data_header(), payload(pool, 1001));
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error(), errc::link_frame_too_large);
}

TEST(link_sender, window_bounds_frames_in_flight) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(1u << 20, 3, 8)};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.submit(data_header(), payload(pool, 1)));
  for (int i = 0; i < 3; ++i) ASSERT_NE(s.next_transmit(), nullptr);
  EXPECT_EQ(s.next_transmit(), nullptr);
  EXPECT_EQ(s.unacked_frames(), 3u);
  ASSERT_TRUE(s.on_ack(2));
  ASSERT_NE(s.next_transmit(), nullptr);
  ASSERT_NE(s.next_transmit(), nullptr);
  EXPECT_EQ(s.next_transmit(), nullptr);
}

TEST(link_sender, resume_resends_everything_after_the_peer_last_seen_in_order) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(1u << 20)};
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(s.submit(data_header(), payload(pool, 10)));
    ASSERT_NE(s.next_transmit(), nullptr);
  }
  ASSERT_TRUE(s.on_ack(2));
  ASSERT_TRUE(s.resume(4));  // the peer got 3 and 4; 5 and 6 were lost
  EXPECT_EQ(s.acked_seq(), 4u);
  EXPECT_EQ(s.next_transmit(), nullptr);  // credit restarts at zero until the peer's grant
  ASSERT_TRUE(s.on_credit(1000));
  for (std::uint64_t seq : {5u, 6u}) {
    const outgoing_frame* f = s.next_transmit();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->header.seq, seq);
  }
  EXPECT_EQ(s.next_transmit(), nullptr);
  EXPECT_EQ(s.stats().retransmits, 2u);
  // A new frame continues the sequence and is not a retransmit.
  ASSERT_TRUE(s.submit(data_header(), payload(pool, 10)));
  EXPECT_EQ(s.next_transmit()->header.seq, 7u);
  EXPECT_EQ(s.stats().retransmits, 2u);
}

TEST(link_sender, ack_beyond_sent_is_a_protocol_error) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(0)};
  ASSERT_TRUE(s.submit(data_header(), payload(pool, 10)));  // queued, never sent
  auto r = s.on_ack(1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::link_ack_beyond_sent);
  EXPECT_EQ(s.on_ack(0).value(), 0u);  // nothing acked yet: harmless
}

TEST(link_sender, resume_out_of_range_is_a_protocol_error) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(1u << 20)};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s.submit(data_header(), payload(pool, 10)));
    ASSERT_NE(s.next_transmit(), nullptr);
  }
  ASSERT_TRUE(s.on_ack(2));
  EXPECT_EQ(s.resume(4).error(), errc::link_resume_out_of_range);  // never sent
  EXPECT_EQ(s.resume(1).error(), errc::link_resume_out_of_range);  // already acked 2
}

TEST(link_sender, credit_grant_overflow_is_a_protocol_error) {
  link_sender_config c = cfg(100);
  c.max_credit = 1000;
  link_sender s{c};
  ASSERT_TRUE(s.on_credit(900));
  EXPECT_EQ(s.on_credit(1).error(), errc::link_credit_overflow);
  EXPECT_EQ(s.on_credit(~std::uint64_t{0}).error(), errc::link_credit_overflow);
  EXPECT_EQ(s.credit(), 1000u);
}

TEST(link_sender, control_frames_are_refused) {
  io::buffer_pool pool{test::small_pool_config()};
  link_sender s{cfg(100)};
  wire::frame_header h;
  h.body = wire::ack_fields{1};
  EXPECT_EQ(s.submit(h, payload(pool, 0)).error(), errc::link_not_reliable);
  h.body = wire::heartbeat_fields{};
  EXPECT_EQ(s.submit(h, payload(pool, 0)).error(), errc::link_not_reliable);
  wire::frame_header c;
  c.body = wire::collective_fields{};
  EXPECT_TRUE(s.submit(c, payload(pool, 0)));
}

}  // namespace
}  // namespace vessel::actors
