#include "actors/errc.hpp"

#include <string>

namespace vessel::actors {
namespace {

class actors_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vessel.actors"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::missing_rank: return "the launcher gives a world size but no rank";
      case errc::missing_world_size: return "the launcher gives a rank but no world size";
      case errc::malformed_number: return "not a decimal integer in range";
      case errc::invalid_world_size: return "world size must be at least 1";
      case errc::rank_out_of_range: return "rank is out of range for the world size";
      case errc::malformed_endpoint: return "address is not host:port";
      case errc::missing_store_port: return "MASTER_ADDR is set without MASTER_PORT";
      case errc::bad_transport_override: return "unknown transport override";
      case errc::transport_unavailable: return "the forced transport cannot reach the peer";
      case errc::host_identity_unavailable: return "cannot read this host's name";
      case errc::token_missing: return "no cluster token is configured";
      case errc::token_too_short: return "the cluster token is too short";
      case errc::token_file_unreadable: return "the cluster token file cannot be read";
      case errc::token_file_permissions: return "the cluster token file is accessible to others";
      case errc::random_unavailable: return "no random bytes for a handshake challenge";
      case errc::crypto_failure: return "HMAC-SHA256 computation failed";
      case errc::handshake_version_mismatch: return "peer speaks another protocol version";
      case errc::handshake_world_mismatch: return "peer has another world size";
      case errc::handshake_rank_out_of_range: return "peer rank is out of range";
      case errc::handshake_wrong_peer: return "peer is not the expected rank";
      case errc::handshake_missing_response: return "peer sent no authentication response";
      case errc::handshake_bad_response: return "peer authentication response does not verify";
      case errc::handshake_unexpected_frame: return "unexpected frame during the handshake";
      case errc::store_unreachable: return "no key-value store at the address";
      case errc::store_timeout: return "key-value store operation timed out";
      case errc::store_key_not_found: return "key not found in the key-value store";
      case errc::store_limit_exceeded: return "key-value store limit exceeded";
      case errc::store_not_integer: return "value is not an 8-byte integer";
      case errc::store_too_many_clients: return "key-value store serves too many clients";
      case errc::store_connection_lost: return "connection to the key-value store lost";
      case errc::link_would_block: return "link send queue is full";
      case errc::link_frame_too_large: return "frame exceeds the link's send bound";
      case errc::link_not_reliable: return "frame is not a sequenced link frame";
      case errc::link_ack_beyond_sent: return "peer acknowledged a frame never sent";
      case errc::link_resume_out_of_range: return "peer resumes from an out-of-range seq";
      case errc::link_sequence_gap: return "gap in the peer's sequence numbers";
      case errc::link_credit_exceeded: return "peer sent more bytes than its credit";
      case errc::link_credit_overflow: return "credit grant overflows the send window";
      case errc::link_consumed_beyond_received: return "consumed more bytes than received";
      case errc::link_peer_silent: return "peer silent past its deadline";
      case errc::mesh_message_too_large: return "message larger than the mesh's largest block";
      case errc::mesh_peer_down: return "link to the peer is down";
      case errc::mesh_closed: return "mesh closed";
      case errc::mesh_reconnect_timeout: return "peer not back within the reconnect deadline";
      case errc::mesh_handshake_timeout: return "handshake not finished in time";
      case errc::mesh_connect_timeout: return "not every peer connected by the deadline";
      case errc::mesh_protocol_error: return "peer broke the link protocol";
      case errc::bad_scheduler_override: return "unknown CAF scheduler or actor thread";
      case errc::mesh_bad_split: return "split message sent to self";
      case errc::bad_binding_override: return "unknown CPU binding";
      case errc::cpu_binding_failed: return "cannot bind the process to a core";
    }
    return "unknown vessel.actors error";
  }
};

}  // namespace

const std::error_category& actors_category() noexcept {
  static const actors_error_category category;
  return category;
}

}  // namespace vessel::actors
