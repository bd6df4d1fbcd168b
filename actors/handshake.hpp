#pragma once
// The link handshake as a pure state machine: no sockets, no CAF, no clock of its own. The link
// that owns a connection feeds it decoded frame headers and sends the hellos it returns, until it
// ends accepted or refused. Three hellos, mutual authentication:
//   initiator → hello(rank, world, incarnation, challenge_i)
//   acceptor  → hello(rank, world, incarnation, challenge_a, response_i)   [checks version, world,
//                                                                            rank range]
//   initiator → hello(rank, world, incarnation, response_a)               [verifies response_i]
//   acceptor verifies response_a.
// response_x = HMAC-SHA256(token, challenge_x || response_context) (actors/auth.hpp): the context
// binds both ranks, incarnations, the world size and the direction, so no response can be replayed
// to another rank or reflected back. The initiator accepts once the acceptor's response verifies,
// the acceptor only after the third hello: the initiator sends that hello before any other frame.
// TODO(security): this authenticates the peer, not the bytes that follow; a relay on the path could
// still tamper with later frames (a session key from both challenges would close that).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <variant>

#include "actors/auth.hpp"
#include "wire/frame_header.hpp"

namespace vessel::actors {

/// What one side knows before the handshake. Every key with its default.
struct handshake_config {
  std::uint32_t self_rank = 0;
  std::uint32_t world_size = 1;
  std::uint64_t incarnation = 0;    ///< this process's incarnation (bumped on each restart)
  std::uint64_t last_seq_seen = 0;  ///< highest seq received in order from this peer before
  /// The rank the initiator dialled; a different rank answering is refused. The acceptor may set
  /// it too (e.g. when only higher ranks are expected to dial in), or leave it open.
  std::optional<std::uint32_t> expected_peer_rank;
  /// From construction to expired(): a peer that connects and stalls is dropped after this.
  std::chrono::nanoseconds timeout = std::chrono::seconds{10};
};

/// The handshake succeeded: the peer proved it holds the token.
struct handshake_accepted {
  std::uint32_t peer_rank = 0;
  std::uint64_t peer_incarnation = 0;
  std::uint64_t peer_last_seq_seen = 0;  ///< resend what follows it
  bool operator==(const handshake_accepted&) const = default;
};

/// The peer was refused; the owner logs `reason`, closes the connection and delivers nothing the
/// peer sent.
struct handshake_refused {
  std::error_code code;  ///< an actors::errc handshake_* member
  std::string reason;    ///< one log line: what was wrong, with the values involved
};

/// One side of one connection's handshake. Not thread-safe; it lives on the reactor thread that
/// owns the connection. Holds a reference to the token, which must outlive it.
class handshake {
 public:
  using clock = std::chrono::steady_clock;
  enum class role { initiator, acceptor };
  enum class state {
    idle,                   ///< initiator before opening_hello()
    awaiting_opening,       ///< acceptor: waits for the initiator's challenge
    awaiting_reply,         ///< initiator: waits for the acceptor's response and challenge
    awaiting_confirmation,  ///< acceptor: waits for the initiator's response
    accepted,
    refused,
  };

  /// The side that dialled. `challenge` must be fresh (make_challenge()) for every connection.
  static handshake initiator(const cluster_token& token, const handshake_config& config,
                             const wire::nonce& challenge, clock::time_point now);
  /// The side that accepted the connection.
  static handshake acceptor(const cluster_token& token, const handshake_config& config,
                            const wire::nonce& challenge, clock::time_point now);

  /// Initiator only, once, first: the opening hello to send. Otherwise nullopt.
  std::optional<wire::frame_header> opening_hello();

  /// Consumes one decoded frame from the peer; returns the hello to send in answer, if any.
  /// Anything unexpected refuses the peer. After accepted or refused, frames are ignored (they
  /// belong to the link, or to nobody) and nothing is returned.
  std::optional<wire::frame_header> on_frame(const wire::frame_header& frame);

  /// True when the handshake has not finished by its deadline: the owner drops the peer.
  bool expired(clock::time_point now) const noexcept;

  state current() const noexcept { return state_; }
  role side() const noexcept { return role_; }
  bool done() const noexcept { return state_ == state::accepted || state_ == state::refused; }
  /// Set once the state is accepted.
  const std::optional<handshake_accepted>& accepted() const noexcept { return accepted_; }
  /// Set once the state is refused.
  const std::optional<handshake_refused>& refused() const noexcept { return refused_; }
  clock::time_point deadline() const noexcept { return deadline_; }

 private:
  handshake(const cluster_token& token, const handshake_config& config, role r,
            const wire::nonce& challenge, clock::time_point now);

  std::optional<wire::frame_header> on_opening(const wire::frame_header& frame,
                                               const wire::hello_fields& hello);
  std::optional<wire::frame_header> on_reply(const wire::hello_fields& hello);
  std::optional<wire::frame_header> on_confirmation(const wire::hello_fields& hello);

  /// Checks what every hello must satisfy (version, kind, payload, world, rank range); returns
  /// the hello, or nullptr after refusing.
  const wire::hello_fields* check_hello(const wire::frame_header& frame);
  /// Verifies `response` to our challenge as computed by the peer answering in role `answering`.
  bool verify(const std::optional<wire::nonce>& response, response_context::role answering,
              const wire::hello_fields& peer);
  wire::frame_header make_hello(std::optional<wire::nonce> challenge,
                                std::optional<wire::nonce> response) const;
  std::nullopt_t refuse(std::error_code code, std::string reason);

  const cluster_token* token_;
  handshake_config config_;
  role role_;
  state state_;
  wire::nonce challenge_;  // ours
  clock::time_point deadline_;
  std::optional<wire::hello_fields> peer_;  // the peer's first hello, once it passed the checks
  std::optional<handshake_accepted> accepted_;
  std::optional<handshake_refused> refused_;
};

/// "idle", "awaiting_opening", ... for log lines.
const char* to_string(handshake::state s) noexcept;

}  // namespace vessel::actors
