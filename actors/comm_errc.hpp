#pragma once
// Typed errors of point-to-point messaging (the matcher, the runtime, vessel::comm), usable as
// std::error_code. Separate from actors::errc so that link and bootstrap codes stay one list each.

#include <system_error>

namespace vessel::actors {

/// Why a send or a receive failed.
enum class comm_errc {
  source_out_of_range = 1,  ///< a rank that is not in the world (and not any_source).
  tag_reserved,             ///< a tag in the range vessel keeps for itself (collectives, store).
  receive_timeout,          ///< nothing matching the receive arrived within its timeout.
  receive_cancelled,        ///< the receive was cancelled before a message matched it.
  peer_down,                ///< the peer failed for good: its messages will never come.
  not_initialized,          ///< comm::init() has not run, or finalize() already has.
  message_too_large,        ///< the payload exceeds what one message may carry.
  buffer_too_small,         ///< the message does not fit the buffer the receiver gave.
  shutting_down,            ///< the runtime is stopping: the operation was not carried out.
};

const std::error_category& comm_category() noexcept;

inline std::error_code make_error_code(comm_errc e) noexcept {
  return {static_cast<int>(e), comm_category()};
}

}  // namespace vessel::actors

template <>
struct std::is_error_code_enum<vessel::actors::comm_errc> : std::true_type {};
