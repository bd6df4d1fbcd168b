#pragma once
// A plain C++ view of a frame header (wire/frame.capnp), so that the rest of vessel never touches
// Cap'n Proto readers or builders. Allocation-free: fixed-size fields only.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <variant>

namespace vessel::wire {

/// The protocol version this build speaks; mirrors `protocolVersion` in wire/frame.capnp
/// (frame_codec.cpp checks at compile time that both agree).
inline constexpr std::uint16_t protocol_version = 1;

/// Size of a hello challenge and of its HMAC-SHA256 response.
inline constexpr std::size_t nonce_bytes = 32;

/// A hello challenge or response.
using nonce = std::array<std::byte, nonce_bytes>;

/// Handshake, both directions (schema `Hello`).
struct hello_fields {
  std::uint32_t sender_rank = 0;
  std::uint32_t world_size = 0;
  std::uint64_t incarnation = 0;    ///< bumped each time a rank process restarts
  std::optional<nonce> challenge;   ///< absent when this hello only answers
  std::optional<nonce> response;    ///< absent in the opening hello
  std::uint64_t last_seq_seen = 0;  ///< highest seq received in order from the peer
  bool operator==(const hello_fields&) const = default;
};

/// One fragment of an application message (schema `DataHeader`).
struct data_fields {
  std::uint32_t src = 0;
  std::uint32_t dst = 0;
  std::uint64_t tag = 0;
  std::uint64_t message_id = 0;
  std::uint32_t fragment_index = 0;
  std::uint32_t fragment_count = 1;  ///< 1 when the message is not split
  std::uint64_t total_len = 0;
  std::uint64_t fragment_offset = 0;  ///< byte offset of this payload within the message
  bool operator==(const data_fields&) const = default;
};

/// Cumulative acknowledgement (schema `Ack`).
struct ack_fields {
  std::uint64_t cumulative_seq = 0;  ///< every frame with seq <= this was received
  bool closing = false;  ///< the sender ends in order: all its frames acked, all ours acked
  bool operator==(const ack_fields&) const = default;
};

/// Flow-control grant (schema `Credit`).
struct credit_fields {
  std::uint64_t bytes = 0;  ///< additional payload bytes granted to the sender
  bool operator==(const credit_fields&) const = default;
};

/// Liveness and RTT probe (schema `Heartbeat`).
struct heartbeat_fields {
  std::uint64_t send_time_ns = 0;
  std::uint64_t echo_time_ns = 0;  ///< send_time_ns of the last heartbeat received, 0 if none
  bool operator==(const heartbeat_fields&) const = default;
};

/// One step of a running collective (schema `CollectiveStep`).
struct collective_fields {
  std::uint64_t communicator = 0;
  std::uint64_t operation = 0;  ///< sequence number of the collective on its communicator
  std::uint32_t step = 0;
  std::uint32_t chunk_index = 0;
  bool operator==(const collective_fields&) const = default;
};

/// A message to or from a device actor (schema `DeviceMessage`).
struct device_fields {
  std::uint32_t device_id = 0;
  std::uint16_t kind = 0;
  std::uint64_t request_id = 0;  ///< pairs a reply with its request; 0 when unsolicited
  bool operator==(const device_fields&) const = default;
};

/// Which member of the header's union a frame carries; the order is the variant's.
enum class frame_kind : std::uint8_t { hello, data, ack, credit, heartbeat, collective, device };

/// The header of one frame (schema `Frame`).
struct frame_header {
  std::uint16_t version = protocol_version;
  std::uint64_t seq = 0;          ///< link sequence number; 0 on link control frames
  std::uint32_t payload_len = 0;  ///< exact payload bytes that follow the header
  std::optional<std::uint32_t> crc32c;  ///< CRC32C of the payload, when the link asks for it
  std::variant<hello_fields, data_fields, ack_fields, credit_fields, heartbeat_fields,
               collective_fields, device_fields>
      body;

  /// The kind of `body`.
  frame_kind kind() const noexcept { return static_cast<frame_kind>(body.index()); }
  bool operator==(const frame_header&) const = default;
};

}  // namespace vessel::wire
