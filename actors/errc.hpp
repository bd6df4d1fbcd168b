#pragma once
// Typed errors of the actors layer (bootstrap, authentication, handshake), usable as
// std::error_code. The code says what kind of failure it is; detailed_error
// (actors/detailed_error.hpp) carries the line that names the variable, file or peer involved.

#include <system_error>

namespace vessel::actors {

/// Why a rank could not start, or why a peer was refused.
enum class errc {
  missing_rank = 1,        ///< a launcher gives the world size but not this process's rank.
  missing_world_size,      ///< a launcher gives the rank but not the world size.
  malformed_number,        ///< a rank, size or port variable is not a decimal integer in range.
  invalid_world_size,      ///< the world size is below 1.
  rank_out_of_range,       ///< a rank (or local rank) is negative or not below the world size.
  malformed_endpoint,      ///< a store address is not `host:port`, `[v6]:port` or has a bad port.
  missing_store_port,      ///< MASTER_ADDR is set without MASTER_PORT.
  bad_transport_override,  ///< VESSEL_TRANSPORT is not one of auto, tcp, shm, rdma.
  transport_unavailable,   ///< the forced transport cannot reach the peer (shm across hosts,
                           ///< rdma not configured).
  host_identity_unavailable,  ///< gethostname failed.
  token_missing,              ///< neither VESSEL_TOKEN nor VESSEL_TOKEN_FILE is set.
  token_too_short,            ///< the cluster token is shorter than min_token_bytes.
  token_file_unreadable,   ///< the token file cannot be opened, is not a regular file or too big.
  token_file_permissions,  ///< the token file is accessible to its group or to others.
  random_unavailable,      ///< OpenSSL could not produce random bytes for a challenge.
  crypto_failure,          ///< OpenSSL failed to compute an HMAC.
  handshake_version_mismatch,   ///< the peer speaks another protocol version.
  handshake_world_mismatch,     ///< the peer's world size differs from ours.
  handshake_rank_out_of_range,  ///< the peer claims a rank outside the world (or our own rank).
  handshake_wrong_peer,         ///< the peer is not the rank we dialled, or changed identity.
  handshake_missing_response,   ///< the peer sent no response: it has no token.
  handshake_bad_response,       ///< the peer's response does not verify: a wrong token or a replay.
  handshake_unexpected_frame,   ///< a non-hello, duplicate or malformed hello during the handshake.
  store_unreachable,        ///< no key-value store answered at the address before the deadline.
  store_timeout,            ///< a store operation (or a wait for keys) ran past its timeout.
  store_key_not_found,      ///< get without waiting: the key is not in the store.
  store_limit_exceeded,     ///< a key, value, key count, store size or waiter bound was exceeded.
  store_not_integer,        ///< add on a key whose value is not an 8-byte integer.
  store_too_many_clients,   ///< the store already serves its maximum number of clients.
  store_connection_lost,    ///< the connection to the store ended (or the store refused a request).
  link_would_block,         ///< the link's send queue is full (bytes or frames): retry later.
  link_frame_too_large,     ///< a frame larger than the link's whole send bound: never fits.
  link_not_reliable,        ///< a control frame (hello, ack, credit, heartbeat) given to the
                            ///< sequenced path, or a sequenced frame without a sequence number.
  link_ack_beyond_sent,     ///< the peer acks a sequence number this side never sent.
  link_resume_out_of_range, ///< the peer's last-seen seq is past what was sent or before what it
                            ///< already acked: it is not the peer that received our frames.
  link_sequence_gap,        ///< a frame skips sequence numbers on an ordered stream: a broken peer.
  link_credit_exceeded,     ///< the peer sent more payload bytes than it was granted.
  link_credit_overflow,     ///< a credit grant takes the sender's credit past any real window.
  link_consumed_beyond_received,  ///< the app reports consuming bytes it never received.
  link_peer_silent,         ///< nothing heard from the peer within its deadline.
  mesh_message_too_large,   ///< a message larger than the mesh's largest pool block.
  mesh_peer_down,           ///< the link to the peer is down (silent, not back in time, broken).
  mesh_closed,              ///< the mesh was closed.
  mesh_reconnect_timeout,   ///< the peer did not reconnect within the reconnect deadline.
  mesh_handshake_timeout,   ///< a connection did not finish the handshake in time.
  mesh_connect_timeout,     ///< mesh::connect: not every peer was up by the deadline.
  mesh_protocol_error,      ///< a peer sent a frame that breaks the link protocol.
  bad_scheduler_override,   ///< VESSEL_CAF_SCHEDULER or VESSEL_RANK_ACTOR_THREAD: not a choice.
  mesh_bad_split,           ///< a split message goes to self (one block only there).
  bad_binding_override,     ///< VESSEL_BIND is not one of auto, core, none.
  cpu_binding_failed,       ///< hwloc could not read the topology or bind the process.
};

const std::error_category& actors_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), actors_category()};
}

}  // namespace vessel::actors

template <>
struct std::is_error_code_enum<vessel::actors::errc> : std::true_type {};
