// MPI matching rules of actors::message_matcher: wildcards, oldest-first on both queues,
// non-overtaking per (source, tag), cancel, probe, and the bounded unexpected queue that withholds
// credit past its bound and gives it back when drained.

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "actors/comm_errc.hpp"
#include "actors/link_credit.hpp"
#include "actors/message_matcher.hpp"
#include "tests/unit/actors/link_test_support.hpp"

namespace vessel::actors {
namespace {

struct recording_sink final : credit_sink {
  void release(std::uint32_t source, std::size_t bytes) override { released[source] += bytes; }
  void on_backpressure(bool over) override { transitions.push_back(over); }
  std::map<std::uint32_t, std::size_t> released;
  std::vector<bool> transitions;
};

std::uint64_t stamp_of(const p2p_message& m) {
  std::uint64_t s = 0;
  std::memcpy(&s, m.payload.data(), sizeof s);
  return s;
}

class matcher_test : public ::testing::Test {
 protected:
  matcher_config config(std::uint32_t world = 4) {
    matcher_config c;
    c.world_size = world;
    c.initial_nodes = 64;
    return c;
  }
  p2p_message msg(std::uint32_t src, std::uint64_t tag, std::uint64_t stamp, std::size_t len = 64) {
    return p2p_message{src, tag, stamp, test::payload(pool_, len, stamp)};
  }

  static constexpr std::size_t block_bytes = 65536;  // test::small_pool_config's one class
  io::buffer_pool pool_{test::small_pool_config(512)};
  recording_sink sink_;
};

TEST_F(matcher_test, posted_receive_takes_an_arriving_message_that_fits) {
  message_matcher m{config(), sink_};
  auto posted = m.post_receive(2, 7, 99).value();
  EXPECT_FALSE(posted.message);
  ASSERT_NE(posted.id, 0u);

  auto done = m.arrive(msg(2, 7, 1)).value();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->id, posted.id);
  EXPECT_EQ(done->cookie, 99u);
  EXPECT_EQ(stamp_of(done->message), 1u);
  EXPECT_EQ(m.stats().pending_receives, 0u);
  EXPECT_EQ(sink_.released[2], message_credit(64))
      << "a matched message's credit goes back at once";
}

TEST_F(matcher_test, message_for_another_source_or_tag_waits_as_unexpected) {
  message_matcher m{config(), sink_};
  auto posted = m.post_receive(1, 5, 0).value();
  EXPECT_FALSE(m.arrive(msg(2, 5, 1)).value());  // wrong source
  EXPECT_FALSE(m.arrive(msg(1, 6, 2)).value());  // wrong tag
  EXPECT_EQ(m.stats().unexpected_messages, 2u);
  EXPECT_EQ(m.stats().pending_receives, 1u);

  auto r = m.post_receive(1, 6, 0).value();
  ASSERT_TRUE(r.message);
  EXPECT_EQ(stamp_of(*r.message), 2u);
  EXPECT_TRUE(m.cancel(posted.id));
}

TEST_F(matcher_test, receive_takes_the_oldest_unexpected_message_that_fits) {
  message_matcher m{config(), sink_};
  for (std::uint64_t i = 0; i < 6; ++i) {
    ASSERT_FALSE(m.arrive(msg(static_cast<std::uint32_t>(i % 3), 10 + i % 2, i)).value());
  }
  // Arrivals: (0,10,#0) (1,11,#1) (2,10,#2) (0,11,#3) (1,10,#4) (2,11,#5)
  EXPECT_EQ(stamp_of(*m.post_receive(any_source, any_tag, 0).value().message), 0u);
  EXPECT_EQ(stamp_of(*m.post_receive(any_source, 10, 0).value().message), 2u);
  EXPECT_EQ(stamp_of(*m.post_receive(1, any_tag, 0).value().message), 1u);
  EXPECT_EQ(stamp_of(*m.post_receive(0, 11, 0).value().message), 3u);
  EXPECT_EQ(stamp_of(*m.post_receive(any_source, any_tag, 0).value().message), 4u);
  EXPECT_EQ(stamp_of(*m.post_receive(2, 11, 0).value().message), 5u);
  EXPECT_EQ(m.stats().unexpected_messages, 0u);
  EXPECT_EQ(m.stats().unexpected_bytes, 0u);
}

TEST_F(matcher_test, take_now_takes_what_a_receive_would_and_never_posts_one) {
  message_matcher m{config(), sink_};
  EXPECT_FALSE(m.take_now(1, 10));  // nothing here: nothing taken, nothing posted
  EXPECT_FALSE(m.take_now(9, 10));  // no such rank
  EXPECT_EQ(m.stats().pending_receives, 0u);
  ASSERT_FALSE(m.arrive(msg(1, 10, 1)).value());
  ASSERT_FALSE(m.arrive(msg(2, 10, 2)).value());
  ASSERT_FALSE(m.arrive(msg(1, 11, 3)).value());
  EXPECT_EQ(stamp_of(*m.take_now(any_source, 10)), 1u);
  EXPECT_EQ(stamp_of(*m.take_now(1, any_tag)), 3u);
  EXPECT_FALSE(m.take_now(1, 10));
  EXPECT_EQ(stamp_of(*m.take_now(2, 10)), 2u);
  EXPECT_EQ(m.stats().unexpected_messages, 0u);
  EXPECT_EQ(m.stats().matched_on_post, 3u);
  EXPECT_EQ(m.stats().pending_receives, 0u);
}

TEST_F(matcher_test, arriving_message_completes_the_oldest_pending_receive_that_fits) {
  message_matcher m{config(), sink_};
  const receive_id specific = m.post_receive(1, 3, 1).value().id;
  const receive_id any_src = m.post_receive(any_source, 3, 2).value().id;
  const receive_id any_both = m.post_receive(any_source, any_tag, 3).value().id;

  auto a = m.arrive(msg(2, 3, 0)).value();  // not rank 1: the any_source receive is oldest fit
  ASSERT_TRUE(a);
  EXPECT_EQ(a->id, any_src);
  auto b = m.arrive(msg(1, 3, 0)).value();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->id, specific);
  auto c = m.arrive(msg(1, 3, 0)).value();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, any_both);
  EXPECT_FALSE(m.arrive(msg(1, 3, 0)).value());
}

TEST_F(matcher_test, wildcard_posted_before_specific_wins_the_first_message) {
  message_matcher m{config(), sink_};
  const receive_id wild = m.post_receive(any_source, any_tag, 1).value().id;
  const receive_id exact = m.post_receive(0, 4, 2).value().id;
  EXPECT_EQ(m.arrive(msg(0, 4, 0)).value()->id, wild);
  EXPECT_EQ(m.arrive(msg(0, 4, 0)).value()->id, exact);
}

TEST_F(matcher_test, messages_of_one_source_and_tag_never_overtake) {
  // Random mix of arrivals and receives (specific, any_source, any_tag): for each (source, tag)
  // the stamps handed out must come in arrival order.
  message_matcher m{config(4), sink_};
  std::mt19937_64 rng{42};
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint64_t> next_sent, next_seen;
  std::uint64_t delivered = 0;
  auto check = [&](const p2p_message& got) {
    auto key = std::make_pair(got.source, got.tag);
    EXPECT_EQ(stamp_of(got), next_seen[key]) << "source " << got.source << " tag " << got.tag;
    next_seen[key] = stamp_of(got) + 1;
    ++delivered;
  };
  std::uint64_t sent = 0;
  for (int step = 0; step < 20000; ++step) {
    if (rng() % 2 == 0) {
      const auto src = static_cast<std::uint32_t>(rng() % 4);
      const std::uint64_t tag = rng() % 3;
      auto key = std::make_pair(src, tag);
      auto done = m.arrive(msg(src, tag, next_sent[key]++, 16)).value();
      ++sent;
      if (done) check(done->message);
    } else {
      const std::uint32_t src = rng() % 3 == 0 ? any_source : static_cast<std::uint32_t>(rng() % 4);
      const std::uint64_t tag = rng() % 3 == 0 ? any_tag : rng() % 3;
      auto r = m.post_receive(src, tag, 0).value();
      if (r.message) check(*r.message);
    }
  }
  // Drain what is left.
  while (m.stats().unexpected_messages > 0)
    check(*m.post_receive(any_source, any_tag, 0).value().message);
  EXPECT_EQ(delivered, sent);
  EXPECT_GT(m.stats().matched_on_arrival, 0u);
  EXPECT_GT(m.stats().matched_on_post, 0u);
}

TEST_F(matcher_test, cancel_removes_a_pending_receive_once) {
  message_matcher m{config(), sink_};
  const receive_id id = m.post_receive(0, 1, 0).value().id;
  EXPECT_TRUE(m.cancel(id));
  EXPECT_FALSE(m.cancel(id)) << "a second cancel of the same receive";
  EXPECT_FALSE(m.cancel(0));
  EXPECT_FALSE(m.cancel(0xdead'0000'0001ull));
  EXPECT_FALSE(m.arrive(msg(0, 1, 5)).value()) << "a cancelled receive takes nothing";
  EXPECT_EQ(m.stats().cancelled, 1u);

  // The node is reused by a new receive: the stale id must not cancel it.
  const receive_id reused = m.post_receive(3, 1, 0).value().id;
  EXPECT_NE(reused, id);
  EXPECT_FALSE(m.cancel(id));
  EXPECT_TRUE(m.cancel(reused));
}

TEST_F(matcher_test, oldest_fit_names_the_receive_an_arrival_would_take_without_taking_it) {
  message_matcher m{config(), sink_};
  EXPECT_FALSE(m.oldest_fit(1, 3));
  const receive_id specific = m.post_receive(1, 4, 10).value().id;
  const receive_id wildcard = m.post_receive(any_source, 3, 11).value().id;
  const receive_id later = m.post_receive(1, 3, 12).value().id;
  const auto fit = m.oldest_fit(1, 3);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->id, wildcard) << "posted before the specific (1, 3) receive";
  EXPECT_EQ(fit->cookie, 11u);
  EXPECT_EQ(m.oldest_fit(1, 4)->id, specific);
  EXPECT_FALSE(m.oldest_fit(2, 4));
  EXPECT_FALSE(m.oldest_fit(9, 3)) << "outside the world";
  EXPECT_EQ(m.stats().pending_receives, 3u) << "nothing taken";
  (void)later;
}

TEST_F(matcher_test, a_claimed_receive_is_matched_once_and_leaves_the_credit_to_its_owner) {
  message_matcher m{config(), sink_};
  const receive_id first = m.post_receive(any_source, 3, 11).value().id;
  const receive_id second = m.post_receive(2, 3, 12).value().id;
  ASSERT_TRUE(m.claim(first));
  EXPECT_FALSE(m.claim(first)) << "claimed already";
  EXPECT_FALSE(m.cancel(first)) << "a claimed receive is no longer pending";
  // The next message from 2 goes to the receive behind it.
  auto done = m.arrive(msg(2, 3, 7)).value();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->id, second);
  const matcher_stats& st = m.stats();
  EXPECT_EQ(st.claimed, 1u);
  EXPECT_EQ(st.arrived, 2u);
  EXPECT_EQ(st.matched_on_arrival, 2u);
  EXPECT_EQ(st.cancelled, 0u);
  EXPECT_EQ(st.pending_receives, 0u);
  EXPECT_EQ(sink_.released[2], message_credit(64))
      << "only the message the matcher held was credited";
}

TEST_F(matcher_test, completed_receive_cannot_be_cancelled) {
  message_matcher m{config(), sink_};
  const receive_id id = m.post_receive(0, 1, 0).value().id;
  ASSERT_TRUE(m.arrive(msg(0, 1, 5)).value());
  EXPECT_FALSE(m.cancel(id));
}

TEST_F(matcher_test, probe_sees_the_oldest_fit_without_taking_it) {
  message_matcher m{config(), sink_};
  EXPECT_EQ(m.probe(any_source, any_tag), nullptr);
  ASSERT_FALSE(m.arrive(msg(1, 8, 11)).value());
  ASSERT_FALSE(m.arrive(msg(1, 9, 12)).value());
  const p2p_message* p = m.probe(1, 9);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(stamp_of(*p), 12u);
  EXPECT_EQ(stamp_of(*m.probe(any_source, any_tag)), 11u);
  EXPECT_EQ(m.probe(2, any_tag), nullptr);
  EXPECT_EQ(m.stats().unexpected_messages, 2u) << "probe takes nothing";
}

TEST_F(matcher_test, any_tag_never_takes_a_reserved_tag) {
  message_matcher m{config(), sink_};
  const std::uint64_t internal = reserved_tag_base + 3;
  ASSERT_FALSE(m.arrive(msg(1, internal, 1)).value());
  EXPECT_FALSE(m.post_receive(any_source, any_tag, 0).value().message);
  EXPECT_EQ(m.probe(1, any_tag), nullptr);
  auto exact = m.post_receive(1, internal, 0).value();
  ASSERT_TRUE(exact.message) << "the exact reserved tag still matches";
  EXPECT_EQ(stamp_of(*exact.message), 1u);
  // The pending wildcard from above is not completed by a reserved tag either.
  EXPECT_FALSE(m.arrive(msg(1, internal, 2)).value());
  auto user = m.arrive(msg(1, 5, 3)).value();
  ASSERT_TRUE(user);
  EXPECT_EQ(stamp_of(user->message), 3u);
}

TEST_F(matcher_test, ranks_outside_the_world_are_refused) {
  message_matcher m{config(4), sink_};
  auto r = m.post_receive(4, 0, 0);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error(), comm_errc::source_out_of_range);
  auto a = m.arrive(msg(9, 0, 0));
  ASSERT_TRUE(a.has_error());
  EXPECT_EQ(a.error(), comm_errc::source_out_of_range);
  EXPECT_EQ(m.stats().unexpected_messages, 0u);
}

TEST_F(matcher_test, buffered_messages_release_credit_until_the_bound_then_withhold_it) {
  matcher_config c = config(2);
  c.max_unexpected_bytes = 4 * block_bytes;  // the bound counts the blocks the messages hold
  c.resume_fraction = 0.5;
  message_matcher m{c, sink_};
  for (int i = 0; i < 4; ++i) ASSERT_FALSE(m.arrive(msg(1, 0, i, 1000)).value());
  EXPECT_EQ(sink_.released[1], 4 * message_credit(1000))
      << "under the bound credit flows on buffering";
  EXPECT_FALSE(m.over_bound());

  for (int i = 4; i < 7; ++i) ASSERT_FALSE(m.arrive(msg(1, 0, i, 1000)).value());
  EXPECT_TRUE(m.over_bound());
  EXPECT_EQ(sink_.released[1], 4 * message_credit(1000)) << "past the bound credit is withheld";
  EXPECT_EQ(m.stats().credit_withheld, 3u);
  ASSERT_EQ(sink_.transitions, std::vector<bool>{true});

  // Taking a held message returns its credit at once.
  auto first = m.post_receive(1, 0, 0).value();  // takes #0 (not held)
  EXPECT_EQ(stamp_of(*first.message), 0u);
  EXPECT_EQ(sink_.released[1], 4 * message_credit(1000));
  EXPECT_TRUE(m.over_bound()) << "6 blocks left, low water is 2";

  m.post_receive(1, 0, 0).value();  // #1 -> 5 blocks
  m.post_receive(1, 0, 0).value();  // #2 -> 4
  m.post_receive(1, 0, 0).value();  // #3 -> 3
  EXPECT_TRUE(m.over_bound());
  EXPECT_EQ(sink_.released[1], 4 * message_credit(1000));
  m.post_receive(1, 0, 0).value();  // #4 (held) -> 2: drained, the rest is released too
  EXPECT_FALSE(m.over_bound());
  EXPECT_EQ(sink_.released[1], 7 * message_credit(1000)) << "every message is credited back once";
  EXPECT_EQ(sink_.transitions, (std::vector<bool>{true, false}));
  m.post_receive(1, 0, 0).value();
  m.post_receive(1, 0, 0).value();
  EXPECT_EQ(sink_.released[1], 7 * message_credit(1000));
  EXPECT_EQ(m.stats().unexpected_peak_bytes, 7000u) << "the lengths, not the blocks";
  EXPECT_EQ(m.stats().unexpected_held_bytes, 0u);
}

TEST_F(matcher_test, the_bytes_bound_counts_the_blocks_that_small_messages_hold) {
  // A pool hands out whole blocks: 100-byte messages in 64 KiB blocks fill the pool's class at
  // the bound's number of blocks, long before their lengths add up to it.
  matcher_config c = config(2);
  c.max_unexpected_bytes = 2 * block_bytes;
  message_matcher m{c, sink_};
  ASSERT_FALSE(m.arrive(msg(1, 0, 0, 100)).value());
  ASSERT_FALSE(m.arrive(msg(1, 0, 1, 100)).value());
  EXPECT_FALSE(m.over_bound());
  EXPECT_EQ(m.stats().unexpected_bytes, 200u);
  EXPECT_EQ(m.stats().unexpected_held_bytes, 2 * block_bytes);
  ASSERT_FALSE(m.arrive(msg(1, 0, 2, 100)).value());
  EXPECT_TRUE(m.over_bound()) << "three blocks held, two allowed";
  EXPECT_EQ(sink_.released[1], 2 * message_credit(100));
  for (int i = 0; i < 3; ++i) m.post_receive(1, 0, 0).value();
  EXPECT_FALSE(m.over_bound());
  EXPECT_EQ(sink_.released[1], 3 * message_credit(100));
  EXPECT_EQ(m.stats().unexpected_held_bytes, 0u);
}

TEST_F(matcher_test, message_count_bound_also_withholds_credit) {
  matcher_config c = config(2);
  c.max_unexpected_messages = 2;
  message_matcher m{c, sink_};
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(m.arrive(msg(0, 0, i, 10)).value());
  EXPECT_TRUE(m.over_bound());
  EXPECT_EQ(sink_.released[0], 2 * message_credit(10));
  for (int i = 0; i < 3; ++i) m.post_receive(0, 0, 0).value();
  EXPECT_EQ(sink_.released[0], 3 * message_credit(10));
  EXPECT_FALSE(m.over_bound());
}

TEST_F(matcher_test, payload_blocks_go_back_to_the_pool_when_taken) {
  message_matcher m{config(), sink_};
  ASSERT_FALSE(m.arrive(msg(0, 0, 1)).value());
  EXPECT_EQ(pool_.stats(0).in_use, 1u);
  {
    auto r = m.post_receive(0, 0, 0).value();
    ASSERT_TRUE(r.message);
  }
  EXPECT_EQ(pool_.stats(0).in_use, 0u) << "the matcher keeps no handle to a taken message";
}

}  // namespace
}  // namespace vessel::actors
