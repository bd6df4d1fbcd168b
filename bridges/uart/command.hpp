#pragma once
// The messages a host and a board exchange inside link payloads (docs/uart.md §6):
//   request (host -> board): command (0x00..0x7F) | request id (u16 LE) | body (0..248 bytes)
//   reply   (board -> host): command | 0x80      | request id (u16 LE, != 0) | status | body (0..247)
//   event   (board -> host): topic (any byte)    | 0x0000                    | body (0..248)
// Request id 0 asks for no reply (fire-and-forget). Status 0 is success; 1 unknown command,
// 2 bad request, 3 busy, anything else a device error.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <system_error>

#include "bridges/uart/link_header.hpp"
#include "wire/result.hpp"

namespace vessel::bridges::uart {

inline constexpr std::size_t command_header_bytes = 3;  ///< command, request id
inline constexpr std::size_t reply_header_bytes = 4;    ///< command | 0x80, request id, status
inline constexpr std::size_t max_request_body = link_max_message - command_header_bytes;  // 248
inline constexpr std::size_t max_reply_body = link_max_message - reply_header_bytes;      // 247
inline constexpr std::uint8_t reply_flag = 0x80;

/// Reply statuses.
enum class reply_status : std::uint8_t { ok = 0, unknown_command = 1, bad_request = 2, busy = 3 };

/// A message from the board, parsed; `body` points into the parsed bytes.
struct board_message {
  enum class kind { reply, event, request } what;
  std::uint8_t command;     ///< the request's command (reply flag cleared), or the event's topic
  std::uint16_t request_id; ///< 0 for an event
  std::uint8_t status;      ///< replies only
  std::span<const std::byte> body;
};

/// Writes `command | id | body` into `out` (at least 3 + body bytes), returns its size.
/// errc::bad_command when command > 0x7F, errc::message_too_large when body > 248 bytes.
result<std::size_t> encode_request(std::uint8_t command, std::uint16_t id,
                                   std::span<const std::byte> body, std::span<std::byte> out) noexcept;

/// Writes a reply to request `id` of `command` into `out`; errc::message_too_large above 247 bytes.
result<std::size_t> encode_reply(std::uint8_t command, std::uint16_t id, reply_status status,
                                 std::span<const std::byte> body, std::span<std::byte> out) noexcept;

/// Writes an event (request id 0) of `topic` into `out`; errc::message_too_large above 248 bytes.
result<std::size_t> encode_event(std::uint8_t topic, std::span<const std::byte> body,
                                 std::span<std::byte> out) noexcept;

/// Parses a message; nullopt when shorter than its header (a reply without status included).
/// Id 0 parses as an event: from a board, unsolicited; from a host, a fire-and-forget command.
/// A message with id != 0 and no reply flag is a request (from host to board).
std::optional<board_message> parse_message(std::span<const std::byte> message) noexcept;

/// The error a non-zero reply status stands for (a default error_code for status 0).
std::error_code status_error(std::uint8_t status) noexcept;

}  // namespace vessel::bridges::uart
