#pragma once
// What a message costs in link credit. Credit stands for the receiver's memory, and a message the
// receiver holds takes a pool block however few bytes it carries: charged by payload bytes alone,
// a 4 MiB window let a sender push ~170,000 8-byte messages at a receiver that was not receiving,
// its 8,192 small blocks ran out, and the link had to shed messages by reconnecting (hundreds of
// reconnects per 100,000 messages, p2p_ranks flood). So each message also costs a fixed overhead,
// charged with its first fragment: a window holds at most window / overhead messages.
//
// Linear in the bytes, so that releases of several messages may be summed.
#include <cstdint>

#include "wire/frame_header.hpp"

namespace vessel::actors {

/// Credit per message on top of its payload bytes: the smallest receive block.
inline constexpr std::uint64_t message_credit_overhead = 4096;

/// Credit a whole message of `payload_bytes` costs; what mesh::release is given for it.
constexpr std::uint64_t message_credit(std::uint64_t payload_bytes) noexcept {
  return payload_bytes + message_credit_overhead;
}

/// Credit one frame costs, given the per-message overhead (link_sender_config and
/// link_receiver_config carry it, so that the state machines can be tested without it): its
/// payload, and the overhead on the first fragment of a data message.
inline std::uint64_t frame_credit(const wire::frame_header& header,
                                  std::uint64_t overhead) noexcept {
  const auto* data = std::get_if<wire::data_fields>(&header.body);
  return header.payload_len + (data != nullptr && data->fragment_index == 0 ? overhead : 0);
}

}  // namespace vessel::actors
