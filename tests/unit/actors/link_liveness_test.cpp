#include "actors/link_liveness.hpp"

#include <gtest/gtest.h>

#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

link_liveness_config cfg() {
  link_liveness_config c;
  c.heartbeat_interval = 100ms;
  c.peer_deadline = 500ms;
  return c;
}

TEST(link_liveness, heartbeat_only_when_idle_for_the_interval) {
  link_liveness l{cfg(), 0ns};
  EXPECT_FALSE(l.on_idle_tick(99ms));
  l.on_sent(50ms);  // traffic postpones the heartbeat
  EXPECT_FALSE(l.on_idle_tick(149ms));
  auto hb = l.on_idle_tick(150ms);
  ASSERT_TRUE(hb);
  EXPECT_EQ(hb->send_time_ns, std::uint64_t(150ms / 1ns));
  EXPECT_EQ(hb->echo_time_ns, 0u);
  EXPECT_FALSE(l.on_idle_tick(200ms));  // the probe counts as sent
  EXPECT_TRUE(l.on_idle_tick(250ms));
  EXPECT_EQ(l.stats().heartbeats_sent, 2u);
  EXPECT_EQ(l.next_heartbeat_at(), 350ms);
}

TEST(link_liveness, peer_silent_past_its_deadline_with_a_reason) {
  link_liveness l{cfg(), 0ns};
  l.on_received(100ms);
  EXPECT_FALSE(l.peer_silent(600ms));  // exactly at the deadline: not yet
  EXPECT_FALSE(l.check_peer(600ms));
  EXPECT_TRUE(l.peer_silent(600ms + 1ns));
  EXPECT_EQ(l.check_peer(600ms + 1ns), errc::link_peer_silent);
  l.on_received(601ms);
  EXPECT_FALSE(l.peer_silent(700ms));
  EXPECT_EQ(l.silent_at(), 1101ms);
}

TEST(link_liveness, a_probe_is_answered_at_once_and_an_answer_never) {
  link_liveness l{cfg(), 0ns};
  auto answer = l.on_heartbeat({5000, 0}, 10ms);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->echo_time_ns, 5000u);
  EXPECT_EQ(answer->send_time_ns, std::uint64_t(10ms / 1ns));
  EXPECT_FALSE(l.on_heartbeat({6000, 7000}, 11ms));  // not our probe: no sample, no answer
  EXPECT_EQ(l.stats().rtt_samples, 0u);
}

TEST(link_liveness, rtt_estimate_from_echoed_heartbeats_follows_rfc6298) {
  link_liveness a{cfg(), 0ns};
  link_liveness b{cfg(), 0ns};
  // Probe and answer through both state machines: one round trip of 10 ms, then three of 20 ms.
  link_time now = 0ns;
  const link_time rtts[] = {10ms, 20ms, 20ms, 20ms};
  for (link_time rtt : rtts) {
    now += 100ms;
    auto probe = a.on_idle_tick(now);
    ASSERT_TRUE(probe);
    auto answer = b.on_heartbeat(*probe, now + rtt / 2);
    ASSERT_TRUE(answer);
    EXPECT_FALSE(a.on_heartbeat(*answer, now + rtt));
    now += rtt;
  }
  const link_liveness_stats& s = a.stats();
  EXPECT_EQ(s.rtt_samples, 4u);
  EXPECT_EQ(s.last_rtt, 20ms);
  // srtt: 10, then += (20 - srtt)/8 three times: 11.25, 12.34375, 13.30078125 ms.
  EXPECT_NEAR(static_cast<double>(s.srtt.count()), 13'300'781.25, 2.0);
  // rttvar (against the srtt before each update): 5, then += (|20 - srtt| - rttvar)/4:
  // 6.25, 6.875, 7.0703125 ms.
  EXPECT_NEAR(static_cast<double>(s.rttvar.count()), 7'070'312.5, 2.0);
  EXPECT_EQ(b.stats().rtt_samples, 0u);  // the answering side takes no sample
}

TEST(link_liveness, a_stale_answer_gives_no_sample) {
  link_liveness a{cfg(), 0ns};
  auto p1 = a.on_idle_tick(100ms);
  auto p2 = a.on_idle_tick(200ms);  // p1 unanswered; p2 supersedes it
  ASSERT_TRUE(p1 && p2);
  EXPECT_FALSE(a.on_heartbeat({1, p1->send_time_ns}, 210ms));
  EXPECT_EQ(a.stats().rtt_samples, 0u);
  EXPECT_FALSE(a.on_heartbeat({1, p2->send_time_ns}, 210ms));
  EXPECT_EQ(a.stats().rtt_samples, 1u);
  EXPECT_EQ(a.stats().srtt, 10ms);
}

}  // namespace
}  // namespace vessel::actors
