#pragma once
// Typed errors of the UART bridge (bridges/uart), usable as std::error_code. Transport errors
// (io::errc: device_unplugged, send_queue_full, ...) pass through unchanged where they say it best.

#include <system_error>

namespace vessel::bridges::uart {

/// Why a call or send on a uart_link failed.
enum class errc {
  call_timeout = 1,   ///< no reply came before the call's deadline (the link was up).
  device_unplugged,   ///< the device went away and was not back before the call's deadline, or
                      ///< the link was told not to retry calls in flight across an unplug.
  device_gone,        ///< the device did not come back within the reopen policy's attempts.
  link_closed,        ///< the link was closed locally (or its reactor stopped).
  too_many_calls,     ///< every call slot is taken: wait for replies, then call again.
  message_too_large,  ///< the body does not fit a link payload (248 bytes in a request).
  window_full,        ///< the reliable window is full (reliable_channel::send: poll, then retry).
  bad_command,        ///< a command id outside 0x00..0x7F (the top bit marks replies).
  unknown_command,    ///< the board answered: it has no such command (status 1).
  bad_request,        ///< the board answered: the request body is malformed (status 2).
  device_busy,        ///< the board answered: busy, try again later (status 3).
  device_error,       ///< the board answered with another non-zero status.
  not_started,        ///< reliable_channel used before start().
};

const std::error_category& uart_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), uart_category()}; }

}  // namespace vessel::bridges::uart

template <>
struct std::is_error_code_enum<vessel::bridges::uart::errc> : std::true_type {};
