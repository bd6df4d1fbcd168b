#include "actors/handshake.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "actors/errc.hpp"
#include "wire/frame_codec.hpp"
#include "wire/stream_decoder.hpp"

namespace vessel::actors {
namespace {

using clock = handshake::clock;
using namespace std::chrono_literals;

const clock::time_point t0{};

cluster_token token_of(std::string_view text) {
  return cluster_token::from_bytes(std::as_bytes(std::span{text}), "test").value();
}

wire::nonce nonce_of(std::uint8_t seed) {
  wire::nonce n;
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::byte>(seed + i * 7);
  return n;
}

// Encodes `frame` to bytes with wire's encoder and decodes it back with the stream decoder, so
// that every hello the state machines exchange went through the real frame format.
wire::frame_header over_the_wire(const wire::frame_header& frame) {
  wire::frame_encoder encoder;
  std::vector<std::byte> bytes;
  auto encoded = encoder.encode_to(frame, {}, bytes);
  EXPECT_TRUE(encoded) << encoded.error().message();
  // Handshake frames carry no payload: a small receive buffer keeps thousands of round trips fast.
  wire::decoder_limits limits;
  limits.max_payload_bytes = 64;
  wire::stream_decoder decoder{limits};
  EXPECT_EQ(decoder.feed(bytes), bytes.size());
  auto next = decoder.next();
  EXPECT_TRUE(next && next.value()) << "the frame did not decode";
  return next.value()->header;
}

handshake_config config(std::uint32_t rank, std::uint32_t world, std::uint64_t incarnation,
                        std::uint64_t last_seq = 0) {
  handshake_config c;
  c.self_rank = rank;
  c.world_size = world;
  c.incarnation = incarnation;
  c.last_seq_seen = last_seq;
  c.timeout = 5s;
  return c;
}

wire::frame_header hello_frame(const wire::hello_fields& h) {
  wire::frame_header f;
  f.body = h;
  return f;
}

wire::hello_fields hello_of(const wire::frame_header& f) {
  return std::get<wire::hello_fields>(f.body);
}

// Both sides with the same token, before any frame.
struct pair_fixture {
  cluster_token token = token_of("the-cluster-token-0123456789");
  handshake_config init_cfg = config(0, 4, 11, 100);
  handshake_config acc_cfg = config(1, 4, 22, 200);
};

void expect_refused(const handshake& h, errc code, std::string_view mentions = {}) {
  ASSERT_EQ(h.current(), handshake::state::refused);
  ASSERT_TRUE(h.refused());
  EXPECT_FALSE(h.accepted()) << "a refused handshake must not expose an acceptance";
  EXPECT_EQ(h.refused()->code, make_error_code(code)) << h.refused()->reason;
  EXPECT_FALSE(h.refused()->reason.empty());
  if (!mentions.empty()) {
    EXPECT_NE(h.refused()->reason.find(mentions), std::string::npos) << h.refused()->reason;
  }
}

TEST(handshake, both_sides_accept_over_real_frame_bytes) {
  pair_fixture p;
  p.init_cfg.expected_peer_rank = 1;
  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);

  auto opening = init.opening_hello();
  ASSERT_TRUE(opening);
  EXPECT_FALSE(init.opening_hello()) << "the opening hello is sent once";
  EXPECT_FALSE(hello_of(*opening).response);
  auto reply = acc.on_frame(over_the_wire(*opening));
  ASSERT_TRUE(reply) << (acc.refused() ? acc.refused()->reason : "");
  EXPECT_EQ(acc.current(), handshake::state::awaiting_confirmation);
  auto confirmation = init.on_frame(over_the_wire(*reply));
  ASSERT_TRUE(confirmation) << (init.refused() ? init.refused()->reason : "");
  EXPECT_FALSE(hello_of(*confirmation).challenge);
  EXPECT_FALSE(acc.on_frame(over_the_wire(*confirmation))) << "nothing to send after acceptance";

  ASSERT_EQ(init.current(), handshake::state::accepted);
  ASSERT_EQ(acc.current(), handshake::state::accepted);
  EXPECT_EQ(*init.accepted(), (handshake_accepted{1, 22, 200}));
  EXPECT_EQ(*acc.accepted(), (handshake_accepted{0, 11, 100}));
  EXPECT_FALSE(init.expired(t0 + 1h)) << "a finished handshake never expires";
  EXPECT_FALSE(acc.expired(t0 + 1h));
}

TEST(handshake, the_higher_rank_can_dial_the_lower_one) {
  auto token = token_of("the-cluster-token-0123456789");
  auto cfg_init = config(3, 4, 7);
  cfg_init.expected_peer_rank = 0;
  auto init = handshake::initiator(token, cfg_init, nonce_of(9), t0);
  auto acc = handshake::acceptor(token, config(0, 4, 8), nonce_of(10), t0);
  auto reply = acc.on_frame(over_the_wire(*init.opening_hello()));
  ASSERT_TRUE(reply);
  auto confirmation = init.on_frame(over_the_wire(*reply));
  ASSERT_TRUE(confirmation);
  acc.on_frame(over_the_wire(*confirmation));
  ASSERT_TRUE(init.accepted());
  ASSERT_TRUE(acc.accepted());
  EXPECT_EQ(init.accepted()->peer_rank, 0u);
  EXPECT_EQ(acc.accepted()->peer_rank, 3u);
  EXPECT_EQ(acc.accepted()->peer_incarnation, 7u);
}

TEST(handshake, initiator_refuses_an_acceptor_with_a_wrong_token) {
  pair_fixture p;
  auto other = token_of("a-different-token-0123456789");
  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  auto acc = handshake::acceptor(other, p.acc_cfg, nonce_of(2), t0);
  auto reply = acc.on_frame(over_the_wire(*init.opening_hello()));
  ASSERT_TRUE(reply);
  EXPECT_FALSE(init.on_frame(over_the_wire(*reply))) << "no confirmation for a wrong token";
  expect_refused(init, errc::handshake_bad_response, "peer rank 1");
  EXPECT_FALSE(acc.accepted()) << "the acceptor got no confirmation, so it accepts nothing";
  EXPECT_TRUE(acc.expired(t0 + 5s));
}

TEST(handshake, acceptor_refuses_an_initiator_with_a_wrong_token) {
  pair_fixture p;
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  wire::hello_fields opening{0, 4, 11, nonce_of(1), std::nullopt, 100};
  auto reply = acc.on_frame(over_the_wire(hello_frame(opening)));
  ASSERT_TRUE(reply);
  // The impostor answers the acceptor's challenge with the right layout but its own token.
  response_context ctx{
      response_context::role::initiator_answers, wire::protocol_version, 4, 0, 11, 100, 1, 22};
  auto forged =
      compute_response(token_of("a-different-token-0123456789"), *hello_of(*reply).challenge, ctx);
  wire::hello_fields confirmation{0, 4, 11, std::nullopt, forged.value(), 100};
  acc.on_frame(over_the_wire(hello_frame(confirmation)));
  expect_refused(acc, errc::handshake_bad_response, "peer rank 0");
}

TEST(handshake, a_peer_without_a_token_sends_no_response_and_is_refused) {
  pair_fixture p;
  // Initiator side: the "acceptor" answers with a challenge but no response.
  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  init.opening_hello();
  init.on_frame(over_the_wire(hello_frame({1, 4, 22, nonce_of(2), std::nullopt, 0})));
  expect_refused(init, errc::handshake_missing_response, "no response");

  // Acceptor side: the initiator's second hello carries neither challenge nor response.
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  ASSERT_TRUE(acc.on_frame(over_the_wire(hello_frame({0, 4, 11, nonce_of(1), std::nullopt, 0}))));
  acc.on_frame(over_the_wire(hello_frame({0, 4, 11, std::nullopt, std::nullopt, 0})));
  expect_refused(acc, errc::handshake_missing_response, "no response");
}

TEST(handshake, wrong_protocol_version_is_refused) {
  pair_fixture p;
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  auto frame = hello_frame({0, 4, 11, nonce_of(1), std::nullopt, 0});
  frame.version = wire::protocol_version + 1;  // the stream decoder would reject it earlier
  EXPECT_FALSE(acc.on_frame(frame));
  expect_refused(acc, errc::handshake_version_mismatch, "version 2");

  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  init.opening_hello();
  auto old = hello_frame({1, 4, 22, nonce_of(2), nonce_of(3), 0});
  old.version = 0;
  init.on_frame(old);
  expect_refused(init, errc::handshake_version_mismatch, "version 0");
}

TEST(handshake, world_size_mismatch_is_refused) {
  pair_fixture p;
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  acc.on_frame(over_the_wire(hello_frame({0, 8, 11, nonce_of(1), std::nullopt, 0})));
  expect_refused(acc, errc::handshake_world_mismatch, "world size 8, ours is 4");
}

TEST(handshake, rank_out_of_range_or_our_own_rank_is_refused) {
  pair_fixture p;
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  acc.on_frame(over_the_wire(hello_frame({4, 4, 11, nonce_of(1), std::nullopt, 0})));
  expect_refused(acc, errc::handshake_rank_out_of_range, "peer rank 4");

  auto self = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  self.on_frame(over_the_wire(hello_frame({1, 4, 11, nonce_of(1), std::nullopt, 0})));
  expect_refused(self, errc::handshake_rank_out_of_range, "our own rank 1");
}

TEST(handshake, initiator_refuses_a_rank_it_did_not_dial) {
  pair_fixture p;
  p.init_cfg.expected_peer_rank = 2;
  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);  // rank 1 answers
  auto reply = acc.on_frame(over_the_wire(*init.opening_hello()));
  ASSERT_TRUE(reply);
  EXPECT_FALSE(init.on_frame(over_the_wire(*reply)));
  expect_refused(init, errc::handshake_wrong_peer, "expected rank 2");
}

TEST(handshake, non_hello_frames_before_acceptance_are_refused) {
  pair_fixture p;
  wire::frame_header data;
  data.body = wire::data_fields{0, 1, 5, 1, 0, 1, 3, 0};
  data.payload_len = 3;
  data.seq = 1;

  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  EXPECT_FALSE(acc.on_frame(data));
  expect_refused(acc, errc::handshake_unexpected_frame, "data frame");

  // Also between the opening hello and the confirmation.
  auto acc2 = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  ASSERT_TRUE(acc2.on_frame(over_the_wire(hello_frame({0, 4, 11, nonce_of(1), std::nullopt, 0}))));
  wire::frame_header heartbeat;
  heartbeat.body = wire::heartbeat_fields{1, 0};
  acc2.on_frame(over_the_wire(heartbeat));
  expect_refused(acc2, errc::handshake_unexpected_frame, "heartbeat frame");

  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  init.opening_hello();
  init.on_frame(data);
  expect_refused(init, errc::handshake_unexpected_frame, "data frame");
}

TEST(handshake, a_frame_before_the_opening_hello_is_refused) {
  pair_fixture p;
  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  init.on_frame(over_the_wire(hello_frame({1, 4, 22, nonce_of(2), nonce_of(3), 0})));
  expect_refused(init, errc::handshake_unexpected_frame, "before our opening hello");
  EXPECT_FALSE(init.opening_hello()) << "a refused initiator sends nothing";
}

TEST(handshake, duplicate_or_malformed_hellos_are_refused) {
  pair_fixture p;
  const wire::hello_fields opening{0, 4, 11, nonce_of(1), std::nullopt, 0};

  auto dup = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  ASSERT_TRUE(dup.on_frame(over_the_wire(hello_frame(opening))));
  dup.on_frame(over_the_wire(hello_frame(opening)));
  expect_refused(dup, errc::handshake_unexpected_frame, "second challenge");

  auto no_challenge = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  no_challenge.on_frame(over_the_wire(hello_frame({0, 4, 11, std::nullopt, std::nullopt, 0})));
  expect_refused(no_challenge, errc::handshake_unexpected_frame, "no challenge");

  auto early_response = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  early_response.on_frame(over_the_wire(hello_frame({0, 4, 11, nonce_of(1), nonce_of(5), 0})));
  expect_refused(early_response, errc::handshake_unexpected_frame, "already carries a response");

  auto with_payload = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  auto frame = hello_frame(opening);
  frame.payload_len = 16;
  with_payload.on_frame(frame);
  expect_refused(with_payload, errc::handshake_unexpected_frame, "16 payload bytes");

  // An initiator whose acceptor answers without a challenge of its own.
  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  init.opening_hello();
  init.on_frame(over_the_wire(hello_frame({1, 4, 22, std::nullopt, nonce_of(3), 0})));
  expect_refused(init, errc::handshake_unexpected_frame, "without a challenge");
}

TEST(handshake, a_peer_that_changes_identity_mid_handshake_is_refused) {
  pair_fixture p;
  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  auto reply = acc.on_frame(over_the_wire(*init.opening_hello()));
  auto confirmation = init.on_frame(over_the_wire(*reply));
  ASSERT_TRUE(confirmation);
  auto changed = hello_of(*confirmation);
  changed.incarnation += 1;
  acc.on_frame(over_the_wire(hello_frame(changed)));
  expect_refused(acc, errc::handshake_wrong_peer, "in the middle of the handshake");
}

TEST(handshake, a_response_replayed_to_a_different_rank_is_refused) {
  // Worst case for the attacker: the victim reuses its challenge. A reply recorded from rank 1
  // (to rank 0) is replayed by rank 2 (relabelled as rank 2), and to rank 3 as the challenger.
  pair_fixture p;
  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  const auto recorded = hello_of(*acc.on_frame(over_the_wire(*init.opening_hello())));

  auto relabelled = recorded;
  relabelled.sender_rank = 2;
  auto victim = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  victim.opening_hello();
  victim.on_frame(over_the_wire(hello_frame(relabelled)));
  expect_refused(victim, errc::handshake_bad_response, "does not verify");

  auto other_challenger = handshake::initiator(p.token, config(3, 4, 11, 100), nonce_of(1), t0);
  other_challenger.opening_hello();
  other_challenger.on_frame(over_the_wire(hello_frame(recorded)));
  expect_refused(other_challenger, errc::handshake_bad_response, "does not verify");

  // A confirmation recorded from rank 0 replayed to an acceptor of rank 2 (same challenge).
  auto confirmation = hello_of(*init.on_frame(over_the_wire(hello_frame(recorded))));
  auto acc2 = handshake::acceptor(p.token, config(2, 4, 22, 200), nonce_of(2), t0);
  ASSERT_TRUE(
      acc2.on_frame(over_the_wire(hello_frame({0, 4, 11, nonce_of(1), std::nullopt, 100}))));
  acc2.on_frame(over_the_wire(hello_frame(confirmation)));
  expect_refused(acc2, errc::handshake_bad_response, "does not verify");
}

TEST(handshake, a_challenge_reflected_back_at_its_sender_is_refused) {
  // The attacker, with no token, hands our own challenge to our acceptor and returns its answer.
  pair_fixture p;
  auto ours = handshake::initiator(p.token, config(0, 4, 11), nonce_of(1), t0);
  const auto challenge = *hello_of(*ours.opening_hello()).challenge;
  auto our_acceptor = handshake::acceptor(p.token, config(0, 4, 11), nonce_of(4), t0);
  auto answer =
      our_acceptor.on_frame(over_the_wire(hello_frame({1, 4, 22, challenge, std::nullopt, 0})));
  ASSERT_TRUE(answer);
  ours.on_frame(over_the_wire(hello_frame({1, 4, 22, nonce_of(5), hello_of(*answer).response, 0})));
  expect_refused(ours, errc::handshake_bad_response, "does not verify");
}

TEST(handshake, a_refused_handshake_ignores_everything_after) {
  pair_fixture p;
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  acc.on_frame(over_the_wire(hello_frame({0, 8, 11, nonce_of(1), std::nullopt, 0})));
  expect_refused(acc, errc::handshake_world_mismatch);
  // A now-valid opening hello does not revive it.
  EXPECT_FALSE(acc.on_frame(over_the_wire(hello_frame({0, 4, 11, nonce_of(1), std::nullopt, 0}))));
  expect_refused(acc, errc::handshake_world_mismatch);
}

TEST(handshake, a_stalled_peer_expires_at_the_deadline) {
  pair_fixture p;
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0 + 1s);
  EXPECT_EQ(acc.deadline(), t0 + 6s);
  EXPECT_FALSE(acc.expired(t0 + 5s));
  EXPECT_TRUE(acc.expired(t0 + 6s));

  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  init.opening_hello();
  EXPECT_FALSE(init.expired(t0 + 4999ms));
  EXPECT_TRUE(init.expired(t0 + 5s)) << "an acceptor that never replies is dropped";
}

TEST(handshake, no_single_bit_flip_of_a_valid_hello_is_accepted_in_its_place) {
  // Records one good exchange, then replays it with one bit of a response or of a bound field
  // flipped: every variant must end refused, never accepted.
  pair_fixture p;
  auto init = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
  auto acc = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
  const auto opening = *init.opening_hello();
  const auto reply = hello_of(*acc.on_frame(over_the_wire(opening)));
  const auto confirmation = hello_of(*init.on_frame(over_the_wire(hello_frame(reply))));

  int refusals = 0;
  for (std::size_t bit = 0; bit < wire::nonce_bytes * 8 + 3 * 64; ++bit) {
    auto bad_reply = reply;
    auto bad_confirmation = confirmation;
    if (bit < wire::nonce_bytes * 8) {
      (*bad_reply.response)[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
      (*bad_confirmation.response)[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    } else {
      const std::size_t field = (bit - wire::nonce_bytes * 8) / 64;
      const std::uint64_t flip = std::uint64_t{1} << ((bit - wire::nonce_bytes * 8) % 64);
      if (field == 0) {
        bad_reply.incarnation ^= flip;
        bad_confirmation.incarnation ^= flip;
      } else if (field == 1) {
        bad_reply.last_seq_seen ^= flip;
        bad_confirmation.last_seq_seen ^= flip;
      } else {
        bad_reply.sender_rank ^= static_cast<std::uint32_t>(flip);
        bad_confirmation.sender_rank ^= static_cast<std::uint32_t>(flip);
        if (static_cast<std::uint32_t>(flip) == 0) continue;  // the upper 32 bits do not exist
      }
    }
    auto i = handshake::initiator(p.token, p.init_cfg, nonce_of(1), t0);
    i.opening_hello();
    i.on_frame(over_the_wire(hello_frame(bad_reply)));
    EXPECT_FALSE(i.accepted()) << "bit " << bit;
    refusals += i.refused() ? 1 : 0;

    auto a = handshake::acceptor(p.token, p.acc_cfg, nonce_of(2), t0);
    a.on_frame(over_the_wire(opening));
    a.on_frame(over_the_wire(hello_frame(bad_confirmation)));
    EXPECT_FALSE(a.accepted()) << "bit " << bit;
    refusals += a.refused() ? 1 : 0;
  }
  EXPECT_EQ(refusals, 2 * (wire::nonce_bytes * 8 + 2 * 64 + 32));
}

}  // namespace
}  // namespace vessel::actors
