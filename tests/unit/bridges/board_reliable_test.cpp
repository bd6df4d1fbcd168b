// The board's reliable mode (bridges/uart/board/vessel_serial.h, docs/uart.md): retransmit timeout
// formula, duplicate and out-of-order handling, and two board contexts over a simulated lossy line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <random>
#include <vector>

#include "bridges/uart/board/vessel_serial.h"

namespace {

using bytes = std::vector<std::uint8_t>;

// One end of a simulated 8N1 line: what its context writes is serialised at the baud rate, maybe
// damaged, and lands in the peer's RX ring when its last bit has arrived.
struct endpoint {
  vsl_ctx ctx;
  std::uint8_t rx_storage[512];
  vsl_ring rx;
  endpoint* peer = nullptr;
  std::deque<std::pair<std::uint64_t, std::uint8_t>> in_flight;  // (arrival in us, byte) to peer
  std::uint64_t line_free_us = 0;
  std::vector<bytes> got_reliable, got_unreliable;
  bytes written;  // everything written, for tests that inspect the wire
  // Line damage, per written frame.
  std::mt19937* rng = nullptr;
  double drop = 0, flip = 0;
  std::uint32_t dropped = 0, flipped = 0;
};

std::uint64_t now_us = 0;  // the simulation's clock
constexpr std::uint32_t baud = 115200;
constexpr std::uint64_t byte_us = 10'000'000ull / baud + 1;

void write_cb(void* user, const std::uint8_t* b, std::size_t n) {
  auto* e = static_cast<endpoint*>(user);
  e->written.insert(e->written.end(), b, b + n);
  bytes frame(b, b + n);
  if (e->rng != nullptr) {
    std::uniform_real_distribution<double> u(0, 1);
    if (u(*e->rng) < e->drop) {
      ++e->dropped;
      frame.clear();  // lost on the line (e.g. the receiver's UART saw a framing error)
    } else if (u(*e->rng) < e->flip) {
      ++e->flipped;
      frame[(*e->rng)() % n] ^= static_cast<std::uint8_t>(1u << ((*e->rng)() % 8));
    }
  }
  // The UART still spends the time of the whole frame, lost or not.
  std::uint64_t t = std::max(now_us, e->line_free_us);
  for (std::size_t i = 0; i < n; ++i) {
    t += byte_us;
    if (!frame.empty()) e->in_flight.emplace_back(t, frame[i]);
  }
  e->line_free_us = t;
}

void deliver_cb(void* user, const std::uint8_t* p, std::size_t n, bool reliable) {
  auto* e = static_cast<endpoint*>(user);
  (reliable ? e->got_reliable : e->got_unreliable).emplace_back(p, p + n);
}

void setup(endpoint& e, std::uint8_t session, std::uint32_t line_baud = baud) {
  ASSERT_TRUE(vsl_ring_init(&e.rx, e.rx_storage, sizeof e.rx_storage));
  const vsl_config cfg{line_baud, 10, &e.rx, write_cb, deliver_cb, &e, session};
  ASSERT_EQ(vsl_init(&e.ctx, &cfg, static_cast<std::uint32_t>(now_us / 1000)), VSL_OK);
}

// Moves bytes that have arrived into the peer's ring (as its RX interrupt would).
void carry(endpoint& from) {
  while (!from.in_flight.empty() && from.in_flight.front().first <= now_us) {
    EXPECT_TRUE(vsl_rx_push(&from.peer->rx, from.in_flight.front().second));
    from.in_flight.pop_front();
  }
}

void step_ms(endpoint& a, endpoint& b) {
  now_us += 1000;
  carry(a);
  carry(b);
  vsl_poll(&a.ctx, static_cast<std::uint32_t>(now_us / 1000));
  vsl_poll(&b.ctx, static_cast<std::uint32_t>(now_us / 1000));
}

constexpr std::uint8_t hdr(std::uint8_t type, std::uint8_t seq) { return static_cast<std::uint8_t>(type << 6 | seq); }

// A link frame written by hand from docs/uart.md: 0xAA | len | header | check | body | CRC-8/SMBUS,
// check = CRC-8/AUTOSAR over header and body.
bytes link_frame(std::uint8_t type, std::uint8_t seq, std::initializer_list<std::uint8_t> body = {}) {
  bytes p{hdr(type, seq), 0};
  p.insert(p.end(), body.begin(), body.end());
  std::uint8_t check = vsl_crc8_autosar_update(VSL_CRC8_AUTOSAR_INIT, &p[0], 1);
  check = static_cast<std::uint8_t>(vsl_crc8_autosar_update(check, p.data() + 2, p.size() - 2) ^ 0xFF);
  p[1] = check;
  bytes out(p.size() + 3);
  EXPECT_EQ(vsl_frame_encode(p.data(), p.size(), out.data(), out.size()), out.size());
  return out;
}

void push_all(endpoint& e, const bytes& b) {
  for (auto x : b) ASSERT_TRUE(vsl_rx_push(&e.rx, x));
}

TEST(board_crc8, autosar_check_value_of_123456789_is_0xDF) {
  const char* check = "123456789";
  EXPECT_EQ(vsl_crc8_autosar_update(VSL_CRC8_AUTOSAR_INIT, reinterpret_cast<const std::uint8_t*>(check), 9) ^ 0xFF, 0xDF);
}

TEST(board_reliable, retransmit_timeout_follows_the_formula_at_9600_and_115200) {
  static_assert(VSL_WINDOW == 4, "the expected values below are for the default window");
  // ceil(2 x (frame + 5 + 4 x 256) x bits x 1000 / baud) + 20
  EXPECT_EQ(vsl_rto_ms(115200, 10, 256), 244u);  // 25700 bits: 223.09 ms -> 224 + 20
  EXPECT_EQ(vsl_rto_ms(9600, 10, 256), 2698u);    // 2677.08 ms -> 2678 + 20
  EXPECT_EQ(vsl_rto_ms(115200, 10, 5), 200u);     // an ACK-sized frame, 20680 bits: 179.51 ms -> 180 + 20
  EXPECT_EQ(vsl_rto_ms(9600, 10, 5), 2175u);      // 2154.17 ms -> 2155 + 20
  EXPECT_EQ(vsl_rto_ms(9600, 11, 256), 2965u);    // 8E1, 28270 bits: 2944.79 ms -> 2945 + 20
}

TEST(board_reliable, unacked_frames_are_sent_again_exactly_when_the_timeout_expires) {
  now_us = 0;
  endpoint a;
  setup(a, 1);
  const std::uint8_t msg[] = {1, 2, 3};
  ASSERT_EQ(vsl_send(&a.ctx, msg, sizeof msg), VSL_OK);
  const std::size_t first = a.written.size();  // SYN (6 bytes) + DATA (8 bytes)
  EXPECT_EQ(first, 14u);
  const std::uint32_t rto = vsl_rto_ms(baud, 10, 6);  // timer armed by the SYN, the oldest frame
  vsl_poll(&a.ctx, rto - 1);
  EXPECT_EQ(a.written.size(), first);
  vsl_poll(&a.ctx, rto);
  EXPECT_EQ(a.written.size(), 2 * first);  // go-back-N: both frames again, in order
  EXPECT_EQ(bytes(a.written.begin() + first, a.written.end()), bytes(a.written.begin(), a.written.begin() + first));
  EXPECT_EQ(a.ctx.stats.timeouts, 1u);
  EXPECT_EQ(a.ctx.stats.retransmitted_frames, 2u);
}

TEST(board_reliable, window_full_pushes_back_until_an_ack_frees_it) {
  now_us = 0;
  endpoint a;
  setup(a, 1);
  const std::uint8_t msg[] = {7};
  for (int i = 1; i < VSL_WINDOW; ++i) ASSERT_EQ(vsl_send(&a.ctx, msg, 1), VSL_OK);  // SYN holds one slot
  EXPECT_EQ(vsl_send(&a.ctx, msg, 1), VSL_E_WINDOW_FULL);
  EXPECT_EQ(vsl_send(&a.ctx, msg, VSL_MAX_MESSAGE + 1), VSL_E_TOO_LARGE);
  push_all(a, link_frame(VSL_TYPE_ACK, 2));  // acks the SYN (seq 0) and DATA 1
  vsl_poll(&a.ctx, 1);
  EXPECT_EQ(vsl_send_room(&a.ctx), 2u);
  EXPECT_EQ(vsl_send(&a.ctx, msg, 1), VSL_OK);
}

TEST(board_reliable, duplicates_are_dropped_and_acked_again_and_gaps_are_not_delivered) {
  now_us = 0;
  endpoint b;
  setup(b, 9);
  b.written.clear();
  push_all(b, link_frame(VSL_TYPE_DATA, 1, {0x55}));  // before any SYN: dropped, a SYN request sent
  push_all(b, link_frame(VSL_TYPE_SYN, 0, {7}));      // peer's session 7 starts: expect 1
  push_all(b, link_frame(VSL_TYPE_DATA, 1, {0x11}));
  push_all(b, link_frame(VSL_TYPE_DATA, 1, {0x11}));  // its ack was lost: a duplicate
  push_all(b, link_frame(VSL_TYPE_SYN, 0, {7}));      // a duplicate SYN must not reset
  push_all(b, link_frame(VSL_TYPE_DATA, 3, {0x33}));  // DATA 2 was lost: out of order
  bytes forged = link_frame(VSL_TYPE_DATA, 2, {0x66});
  forged[3] ^= 0x01;  // a wrong link check under a right frame CRC: what a bogus candidate looks like
  forged.back() = vsl_crc8(forged.data() + 1, forged.size() - 2);
  push_all(b, forged);
  push_all(b, link_frame(VSL_TYPE_DATA, 2, {0x22}));
  push_all(b, link_frame(VSL_TYPE_UNRELIABLE, 0, {0x99}));
  vsl_poll(&b.ctx, 1);
  EXPECT_EQ(b.got_reliable, (std::vector<bytes>{{0x11}, {0x22}}));
  EXPECT_EQ(b.got_unreliable, (std::vector<bytes>{{0x99}}));
  EXPECT_EQ(b.ctx.stats.unsynced_drops, 1u);
  EXPECT_EQ(b.ctx.stats.duplicates, 2u);
  EXPECT_EQ(b.ctx.stats.out_of_order, 1u);
  EXPECT_EQ(b.ctx.stats.bad_check, 1u);
  // A SYN request, then acks in order: SYN -> 1, DATA1 -> 2, dup DATA1 -> 2, dup SYN -> 2, DATA3 -> 2,
  // DATA2 -> 3.
  bytes acks = link_frame(VSL_TYPE_SYN, 0);
  for (std::uint8_t next : {1, 2, 2, 2, 2, 3}) {
    const bytes f = link_frame(VSL_TYPE_ACK, next);
    acks.insert(acks.end(), f.begin(), f.end());
  }
  EXPECT_EQ(b.written, acks);

  // The peer restarts: a SYN of a new session resets what is expected.
  push_all(b, link_frame(VSL_TYPE_SYN, 0, {8}));
  push_all(b, link_frame(VSL_TYPE_DATA, 1, {0x44}));
  vsl_poll(&b.ctx, 2);
  EXPECT_EQ(b.got_reliable.back(), bytes{0x44});
  EXPECT_EQ(b.ctx.stats.delivered_reliable, 3u);
}

TEST(board_reliable, a_receiver_that_restarts_mid_stream_asks_for_a_syn_and_gets_every_later_payload) {
  // The host bridge reopening the port while the board runs: the restarted receiver has no state,
  // answers the peer's DATA with a SYN request, and the peer's SYN (seq = base - 1) resumes the
  // stream where the window stands. What was in flight at the restart may come twice (the old
  // receiver's deliveries are gone with it); everything sent after it comes once, in order.
  now_us = 0;
  endpoint a, b;
  a.peer = &b, b.peer = &a;
  setup(a, 0x31);
  setup(b, 0x41);
  std::vector<bytes> to_b;
  for (int i = 0; i < 100; ++i) to_b.push_back(bytes(1 + i % 50, static_cast<std::uint8_t>(i)));
  std::size_t next = 0, sent_at_restart = 0;
  bool restarted = false;
  for (int ms = 0; ms < 60'000 && (next < to_b.size() || a.ctx.tx_count != 0); ++ms) {
    while (next < to_b.size() && vsl_send(&a.ctx, to_b[next].data(), to_b[next].size()) == VSL_OK) ++next;
    if (!restarted && b.got_reliable.size() == 30) {
      restarted = true;
      sent_at_restart = next;
      b.got_reliable.clear();
      setup(b, 0x42);  // fresh context and ring: a reboot
    }
    step_ms(a, b);
  }
  ASSERT_TRUE(restarted);
  EXPECT_EQ(a.ctx.tx_count, 0u);
  EXPECT_GE(a.ctx.stats.syn_requests, 1u);
  ASSERT_FALSE(b.got_reliable.empty());
  // A contiguous run of to_b that ends with the last payload and starts at most a window before
  // the first payload sent after the restart.
  const std::size_t first = to_b.size() - b.got_reliable.size();
  EXPECT_TRUE(std::equal(b.got_reliable.begin(), b.got_reliable.end(), to_b.begin() + static_cast<long>(first)));
  EXPECT_LE(first, sent_at_restart);
  EXPECT_GE(first + VSL_WINDOW, sent_at_restart);
}

struct lossy_case {
  std::uint32_t seed;
  double drop, flip;
};

class board_reliable_lossy : public ::testing::TestWithParam<lossy_case> {};

TEST_P(board_reliable_lossy, every_payload_is_delivered_exactly_once_in_order_both_ways) {
  now_us = 0;
  std::mt19937 rng(GetParam().seed);
  endpoint a, b;
  a.peer = &b, b.peer = &a;
  a.rng = b.rng = &rng;
  a.drop = b.drop = GetParam().drop;
  a.flip = b.flip = GetParam().flip;
  setup(a, 0x11);
  setup(b, 0x22);

  std::vector<bytes> to_b, to_a;
  for (int i = 0; i < 300; ++i) to_b.push_back(bytes(rng() % (VSL_MAX_MESSAGE + 1), static_cast<std::uint8_t>(i)));
  for (int i = 0; i < 200; ++i) to_a.push_back(bytes(rng() % 40, static_cast<std::uint8_t>(i)));
  for (auto* v : {&to_b, &to_a}) {
    for (std::size_t i = 0; i < v->size(); ++i) {
      for (auto& x : (*v)[i]) x = static_cast<std::uint8_t>(x ^ rng());
    }
  }
  std::size_t next_b = 0, next_a = 0, unreliable_sent = 0;
  const std::uint64_t limit_us = 600'000'000;  // 10 simulated minutes
  while ((b.got_reliable.size() < to_b.size() || a.got_reliable.size() < to_a.size()) && now_us < limit_us) {
    while (next_b < to_b.size() && vsl_send(&a.ctx, to_b[next_b].data(), to_b[next_b].size()) == VSL_OK) ++next_b;
    while (next_a < to_a.size() && vsl_send(&b.ctx, to_a[next_a].data(), to_a[next_a].size()) == VSL_OK) ++next_a;
    if (rng() % 200 == 0) {
      const std::uint8_t note[] = {0xEE, static_cast<std::uint8_t>(unreliable_sent >> 8),
                                   static_cast<std::uint8_t>(unreliable_sent)};
      ++unreliable_sent;
      ASSERT_EQ(vsl_send_unreliable(&a.ctx, note, sizeof note), VSL_OK);
    }
    step_ms(a, b);
  }
  // Let the last acks land, then nothing may be left in flight.
  for (int i = 0; i < 3000; ++i) step_ms(a, b);
  // Compared whole (gtest would print hundreds of payloads on a mismatch): sizes first.
  EXPECT_EQ(b.got_reliable.size(), to_b.size());
  EXPECT_EQ(a.got_reliable.size(), to_a.size());
  EXPECT_TRUE(b.got_reliable == to_b) << "payloads to b differ from those sent";
  EXPECT_TRUE(a.got_reliable == to_a) << "payloads to a differ from those sent";
  EXPECT_EQ(a.ctx.tx_count, 0u);
  EXPECT_EQ(b.ctx.tx_count, 0u);
  // Unreliable notes: a subset, in order, never duplicated.
  auto note_no = [](const bytes& n) { return n.at(1) << 8 | n.at(2); };
  for (std::size_t i = 1; i < b.got_unreliable.size(); ++i) {
    EXPECT_LT(note_no(b.got_unreliable[i - 1]), note_no(b.got_unreliable[i]));
  }
  EXPECT_LE(b.got_unreliable.size(), unreliable_sent);
  if (GetParam().drop > 0) {
    EXPECT_GT(a.dropped + b.dropped, 0u);
    EXPECT_GT(a.ctx.stats.retransmitted_frames + b.ctx.stats.retransmitted_frames, 0u);
    EXPECT_GT(a.ctx.stats.duplicates + b.ctx.stats.duplicates + a.ctx.stats.out_of_order + b.ctx.stats.out_of_order, 0u);
  }
  if (GetParam().flip > 0) {
    EXPECT_GT(b.ctx.parser.counters.crc_errors + a.ctx.parser.counters.crc_errors, 0u);
  }
  EXPECT_EQ(a.rx.overruns + b.rx.overruns, 0u);
  std::printf("line drop %.2f flip %.2f: %.1f s simulated, %u+%u frames dropped, %u+%u flipped, %u+%u resent, "
              "%u+%u caught by the link check\n",
              GetParam().drop, GetParam().flip, static_cast<double>(now_us) / 1e6, a.dropped, b.dropped, a.flipped,
              b.flipped, a.ctx.stats.retransmitted_frames, b.ctx.stats.retransmitted_frames, a.ctx.stats.bad_check,
              b.ctx.stats.bad_check);
}

INSTANTIATE_TEST_SUITE_P(lines, board_reliable_lossy,
                         ::testing::Values(lossy_case{1, 0.0, 0.0}, lossy_case{2, 0.05, 0.0}, lossy_case{3, 0.0, 0.05},
                                           lossy_case{4, 0.08, 0.08}, lossy_case{5, 0.2, 0.1},
                                           lossy_case{6, 0.0, 0.3}));

}  // namespace
