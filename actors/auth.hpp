#pragma once
// Link authentication primitives: the cluster token every rank shares, challenges, and the
// HMAC-SHA256 responses the handshake (actors/handshake.hpp) exchanges. OpenSSL libcrypto does
// the cryptography; nothing here is hand-rolled except the byte layout of the context.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/detailed_error.hpp"
#include "actors/env.hpp"
#include "wire/frame_header.hpp"

namespace vessel::actors {

/// Shortest accepted token: 128 bits, so that guessing it is not an option even when it is text.
inline constexpr std::size_t min_token_bytes = 16;
/// Largest token file read; a token is a short secret, so anything longer is a wrong path.
inline constexpr std::size_t max_token_file_bytes = 4096;

/// The shared secret. Move-only; its bytes are wiped (OPENSSL_cleanse) when it dies.
class cluster_token {
 public:
  /// Takes `bytes` as the token; at least min_token_bytes, else errc::token_too_short.
  static detailed_result<cluster_token> from_bytes(std::span<const std::byte> bytes,
                                                   std::string source);

  cluster_token(cluster_token&& other) noexcept;
  cluster_token& operator=(cluster_token&& other) noexcept;
  cluster_token(const cluster_token&) = delete;
  cluster_token& operator=(const cluster_token&) = delete;
  ~cluster_token();

  std::span<const std::byte> bytes() const noexcept { return bytes_; }
  /// Where it came from ("VESSEL_TOKEN", "VESSEL_TOKEN_FILE=/path"), for the log; never the bytes.
  const std::string& source() const noexcept { return source_; }

 private:
  cluster_token(std::vector<std::byte> bytes, std::string source)
      : bytes_{std::move(bytes)}, source_{std::move(source)} {}
  void wipe() noexcept;

  std::vector<std::byte> bytes_;
  std::string source_;
};

/// VESSEL_TOKEN (its bytes, as set), else the file named by VESSEL_TOKEN_FILE, else
/// errc::token_missing with a line that says how to set one.
detailed_result<cluster_token> load_token(const env_view& env);

/// Reads a token file. Like ssh with a private key, refuses a file its group or others can access
/// (errc::token_file_permissions, "chmod 600 <path>"), checked on the opened descriptor so the
/// file cannot be swapped between check and read. Trailing newlines are not part of the token
/// (`openssl rand -hex 32 > token` writes one).
detailed_result<cluster_token> load_token_file(const std::string& path,
                                               std::string_view variable = "VESSEL_TOKEN_FILE");

/// 32 random bytes from OpenSSL's CSPRNG (RAND_bytes).
detailed_result<wire::nonce> make_challenge();

/// HMAC-SHA256(token, challenge || context). Errors only if OpenSSL fails (errc::crypto_failure).
result<wire::nonce> compute_response(const cluster_token& token, const wire::nonce& challenge,
                                     std::span<const std::byte> context);

/// Constant-time equality (CRYPTO_memcmp): the time taken says nothing about where they differ.
bool responses_equal(const wire::nonce& a, const wire::nonce& b) noexcept;

/// Who answers whose challenge: bound into every response, so that a response computed for one
/// connection cannot be replayed on another (another rank, incarnation, world or direction).
struct response_context {
  /// Which side computes the response: the acceptor answering the initiator's opening challenge,
  /// or the initiator answering the acceptor's. Distinct, so a challenge reflected back at its
  /// sender does not yield a usable answer.
  enum class role : std::uint8_t { acceptor_answers = 1, initiator_answers = 2 };

  role answering = role::acceptor_answers;
  std::uint16_t version = wire::protocol_version;
  std::uint32_t world_size = 0;
  std::uint32_t responder_rank = 0;
  std::uint64_t responder_incarnation = 0;
  std::uint64_t responder_last_seq_seen = 0;  ///< authenticated, since resends start from it
  std::uint32_t challenger_rank = 0;
  std::uint64_t challenger_incarnation = 0;

  /// Bytes of encode(): a 16-byte label, then the fields above, little-endian.
  static constexpr std::size_t encoded_bytes = 16 + 1 + 2 + 4 + 4 + 8 + 8 + 4 + 8;
  /// The fixed byte layout hashed after the challenge.
  std::array<std::byte, encoded_bytes> encode() const noexcept;
};

/// compute_response over `ctx.encode()`.
result<wire::nonce> compute_response(const cluster_token& token, const wire::nonce& challenge,
                                     const response_context& ctx);

}  // namespace vessel::actors
