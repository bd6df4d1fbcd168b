#include "actors/handshake.hpp"

#include <string>

#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

const char* kind_name(wire::frame_kind k) noexcept {
  switch (k) {
    case wire::frame_kind::hello: return "hello";
    case wire::frame_kind::data: return "data";
    case wire::frame_kind::ack: return "ack";
    case wire::frame_kind::credit: return "credit";
    case wire::frame_kind::heartbeat: return "heartbeat";
    case wire::frame_kind::collective: return "collective";
    case wire::frame_kind::device: return "device";
  }
  return "unknown";
}

std::string peer_name(const wire::hello_fields& h) {
  return "peer rank " + std::to_string(h.sender_rank) + " (incarnation " +
         std::to_string(h.incarnation) + ")";
}

}  // namespace

handshake handshake::initiator(const cluster_token& token, const handshake_config& config,
                               const wire::nonce& challenge, clock::time_point now) {
  return handshake{token, config, role::initiator, challenge, now};
}

handshake handshake::acceptor(const cluster_token& token, const handshake_config& config,
                              const wire::nonce& challenge, clock::time_point now) {
  return handshake{token, config, role::acceptor, challenge, now};
}

handshake::handshake(const cluster_token& token, const handshake_config& config, role r,
                     const wire::nonce& challenge, clock::time_point now)
    : token_{&token},
      config_{config},
      role_{r},
      state_{r == role::initiator ? state::idle : state::awaiting_opening},
      challenge_{challenge},
      deadline_{now + std::chrono::duration_cast<clock::duration>(config.timeout)} {}

std::optional<wire::frame_header> handshake::opening_hello() {
  if (state_ != state::idle) return std::nullopt;
  state_ = state::awaiting_reply;
  return make_hello(challenge_, std::nullopt);
}

std::optional<wire::frame_header> handshake::on_frame(const wire::frame_header& frame) {
  if (done()) return std::nullopt;
  if (state_ == state::idle) {
    return refuse(errc::handshake_unexpected_frame,
                  std::string{"a "} + kind_name(frame.kind()) +
                      " frame arrived before our opening hello was sent");
  }
  const wire::hello_fields* hello = check_hello(frame);
  if (hello == nullptr) return std::nullopt;
  switch (state_) {
    case state::awaiting_opening: return on_opening(frame, *hello);
    case state::awaiting_reply: return on_reply(*hello);
    case state::awaiting_confirmation: return on_confirmation(*hello);
    case state::idle:
    case state::accepted:
    case state::refused: break;
  }
  return std::nullopt;
}

bool handshake::expired(clock::time_point now) const noexcept {
  return !done() && now >= deadline_;
}

const wire::hello_fields* handshake::check_hello(const wire::frame_header& frame) {
  if (frame.version != wire::protocol_version) {
    refuse(errc::handshake_version_mismatch,
           "peer speaks protocol version " + std::to_string(frame.version) +
               ", this build speaks " + std::to_string(wire::protocol_version));
    return nullptr;
  }
  const auto* hello = std::get_if<wire::hello_fields>(&frame.body);
  if (hello == nullptr) {
    // Nothing but hellos may pass before acceptance: the peer is not authenticated yet, so its
    // data must never reach an actor.
    refuse(errc::handshake_unexpected_frame, std::string{"a "} + kind_name(frame.kind()) +
                                                 " frame arrived before the handshake " +
                                                 "completed (state " + to_string(state_) + ")");
    return nullptr;
  }
  if (frame.payload_len != 0) {
    refuse(errc::handshake_unexpected_frame, "a hello from " + peer_name(*hello) + " carries " +
                                                 std::to_string(frame.payload_len) +
                                                 " payload bytes; hellos carry none");
    return nullptr;
  }
  if (hello->world_size != config_.world_size) {
    refuse(errc::handshake_world_mismatch, peer_name(*hello) + " has world size " +
                                               std::to_string(hello->world_size) + ", ours is " +
                                               std::to_string(config_.world_size));
    return nullptr;
  }
  if (hello->sender_rank >= config_.world_size) {
    refuse(errc::handshake_rank_out_of_range, peer_name(*hello) +
                                                  " is out of range for world size " +
                                                  std::to_string(config_.world_size));
    return nullptr;
  }
  if (hello->sender_rank == config_.self_rank) {
    refuse(errc::handshake_rank_out_of_range,
           peer_name(*hello) + " claims our own rank " + std::to_string(config_.self_rank));
    return nullptr;
  }
  if (config_.expected_peer_rank && hello->sender_rank != *config_.expected_peer_rank) {
    refuse(errc::handshake_wrong_peer, "expected rank " +
                                           std::to_string(*config_.expected_peer_rank) + ", but " +
                                           peer_name(*hello) + " answered");
    return nullptr;
  }
  if (peer_ &&
      (hello->sender_rank != peer_->sender_rank || hello->incarnation != peer_->incarnation)) {
    refuse(errc::handshake_wrong_peer,
           peer_name(*peer_) + " became " + peer_name(*hello) + " in the middle of the handshake");
    return nullptr;
  }
  return hello;
}

std::optional<wire::frame_header> handshake::on_opening(const wire::frame_header&,
                                                        const wire::hello_fields& hello) {
  if (hello.response) {
    return refuse(errc::handshake_unexpected_frame,
                  "the opening hello of " + peer_name(hello) + " already carries a response");
  }
  if (!hello.challenge) {
    return refuse(errc::handshake_unexpected_frame,
                  "the opening hello of " + peer_name(hello) + " carries no challenge");
  }
  response_context ctx;
  ctx.answering = response_context::role::acceptor_answers;
  ctx.world_size = config_.world_size;
  ctx.responder_rank = config_.self_rank;
  ctx.responder_incarnation = config_.incarnation;
  ctx.responder_last_seq_seen = config_.last_seq_seen;
  ctx.challenger_rank = hello.sender_rank;
  ctx.challenger_incarnation = hello.incarnation;
  auto response = compute_response(*token_, *hello.challenge, ctx);
  if (!response) return refuse(errc::crypto_failure, "HMAC-SHA256 failed in OpenSSL");
  peer_ = hello;
  state_ = state::awaiting_confirmation;
  return make_hello(challenge_, response.value());
}

std::optional<wire::frame_header> handshake::on_reply(const wire::hello_fields& hello) {
  if (!hello.response) {
    return refuse(errc::handshake_missing_response,
                  peer_name(hello) +
                      " sent no response to our challenge: it has no cluster "
                      "token, or is not a vessel acceptor");
  }
  if (!hello.challenge) {
    return refuse(errc::handshake_unexpected_frame,
                  peer_name(hello) + " answered without a challenge of its own");
  }
  if (!verify(hello.response, response_context::role::acceptor_answers, hello)) {
    return refuse(errc::handshake_bad_response,
                  "the response of " + peer_name(hello) +
                      " does not verify: a different cluster token, or a replayed response");
  }
  response_context ctx;
  ctx.answering = response_context::role::initiator_answers;
  ctx.world_size = config_.world_size;
  ctx.responder_rank = config_.self_rank;
  ctx.responder_incarnation = config_.incarnation;
  ctx.responder_last_seq_seen = config_.last_seq_seen;
  ctx.challenger_rank = hello.sender_rank;
  ctx.challenger_incarnation = hello.incarnation;
  auto response = compute_response(*token_, *hello.challenge, ctx);
  if (!response) return refuse(errc::crypto_failure, "HMAC-SHA256 failed in OpenSSL");
  peer_ = hello;
  state_ = state::accepted;
  accepted_ = handshake_accepted{hello.sender_rank, hello.incarnation, hello.last_seq_seen};
  return make_hello(std::nullopt, response.value());
}

std::optional<wire::frame_header> handshake::on_confirmation(const wire::hello_fields& hello) {
  if (hello.challenge) {
    return refuse(errc::handshake_unexpected_frame,
                  peer_name(hello) + " sent a second challenge instead of its response");
  }
  if (!hello.response) {
    return refuse(errc::handshake_missing_response,
                  peer_name(hello) + " sent no response to our challenge: it has no cluster token");
  }
  if (!verify(hello.response, response_context::role::initiator_answers, hello)) {
    return refuse(errc::handshake_bad_response,
                  "the response of " + peer_name(hello) +
                      " does not verify: a different cluster token, or a replayed response");
  }
  state_ = state::accepted;
  accepted_ = handshake_accepted{hello.sender_rank, hello.incarnation, hello.last_seq_seen};
  return std::nullopt;
}

bool handshake::verify(const std::optional<wire::nonce>& response, response_context::role answering,
                       const wire::hello_fields& peer) {
  response_context ctx;
  ctx.answering = answering;
  ctx.world_size = config_.world_size;
  ctx.responder_rank = peer.sender_rank;
  ctx.responder_incarnation = peer.incarnation;
  ctx.responder_last_seq_seen = peer.last_seq_seen;
  ctx.challenger_rank = config_.self_rank;
  ctx.challenger_incarnation = config_.incarnation;
  auto expected = compute_response(*token_, challenge_, ctx);
  return expected && response && responses_equal(expected.value(), *response);
}

wire::frame_header handshake::make_hello(std::optional<wire::nonce> challenge,
                                         std::optional<wire::nonce> response) const {
  wire::frame_header frame;
  frame.version = wire::protocol_version;
  frame.seq = 0;
  frame.payload_len = 0;
  wire::hello_fields hello;
  hello.sender_rank = config_.self_rank;
  hello.world_size = config_.world_size;
  hello.incarnation = config_.incarnation;
  hello.challenge = challenge;
  hello.response = response;
  hello.last_seq_seen = config_.last_seq_seen;
  frame.body = hello;
  return frame;
}

std::nullopt_t handshake::refuse(std::error_code code, std::string reason) {
  state_ = state::refused;
  accepted_.reset();
  refused_ = handshake_refused{code, std::move(reason)};
  return std::nullopt;
}

const char* to_string(handshake::state s) noexcept {
  switch (s) {
    case handshake::state::idle: return "idle";
    case handshake::state::awaiting_opening: return "awaiting_opening";
    case handshake::state::awaiting_reply: return "awaiting_reply";
    case handshake::state::awaiting_confirmation: return "awaiting_confirmation";
    case handshake::state::accepted: return "accepted";
    case handshake::state::refused: return "refused";
  }
  return "unknown";
}

}  // namespace vessel::actors
