#include "bridges/uart/command.hpp"

#include <cstring>

#include "bridges/uart/errc.hpp"

namespace vessel::bridges::uart {
namespace {

std::size_t put_header(std::span<std::byte> out, std::uint8_t command, std::uint16_t id) noexcept {
  out[0] = std::byte{command};
  out[1] = std::byte{static_cast<std::uint8_t>(id & 0xFF)};
  out[2] = std::byte{static_cast<std::uint8_t>(id >> 8)};
  return command_header_bytes;
}

std::size_t put_body(std::span<std::byte> out, std::size_t at, std::span<const std::byte> body) noexcept {
  if (!body.empty()) std::memcpy(out.data() + at, body.data(), body.size());
  return at + body.size();
}

}  // namespace

result<std::size_t> encode_request(std::uint8_t command, std::uint16_t id,
                                   std::span<const std::byte> body, std::span<std::byte> out) noexcept {
  if ((command & reply_flag) != 0) return errc::bad_command;
  if (body.size() > max_request_body) return errc::message_too_large;
  if (out.size() < command_header_bytes + body.size()) return errc::message_too_large;
  return put_body(out, put_header(out, command, id), body);
}

result<std::size_t> encode_reply(std::uint8_t command, std::uint16_t id, reply_status status,
                                 std::span<const std::byte> body, std::span<std::byte> out) noexcept {
  if (body.size() > max_reply_body || out.size() < reply_header_bytes + body.size()) {
    return errc::message_too_large;
  }
  put_header(out, static_cast<std::uint8_t>(command | reply_flag), id);
  out[3] = std::byte{static_cast<std::uint8_t>(status)};
  return put_body(out, reply_header_bytes, body);
}

result<std::size_t> encode_event(std::uint8_t topic, std::span<const std::byte> body,
                                 std::span<std::byte> out) noexcept {
  if (body.size() > max_request_body || out.size() < command_header_bytes + body.size()) {
    return errc::message_too_large;
  }
  return put_body(out, put_header(out, topic, 0), body);
}

std::optional<board_message> parse_message(std::span<const std::byte> m) noexcept {
  if (m.size() < command_header_bytes) return std::nullopt;
  const auto command = static_cast<std::uint8_t>(m[0]);
  const auto id = static_cast<std::uint16_t>(static_cast<unsigned>(m[1]) |
                                             (static_cast<unsigned>(m[2]) << 8));
  if (id == 0) {
    return board_message{board_message::kind::event, command, 0, 0, m.subspan(command_header_bytes)};
  }
  if ((command & reply_flag) == 0) {
    return board_message{board_message::kind::request, command, id, 0, m.subspan(command_header_bytes)};
  }
  if (m.size() < reply_header_bytes) return std::nullopt;
  return board_message{board_message::kind::reply, static_cast<std::uint8_t>(command & ~reply_flag), id,
                       static_cast<std::uint8_t>(m[3]), m.subspan(reply_header_bytes)};
}

std::error_code status_error(std::uint8_t status) noexcept {
  switch (status) {
    case 0: return {};
    case static_cast<std::uint8_t>(reply_status::unknown_command): return errc::unknown_command;
    case static_cast<std::uint8_t>(reply_status::bad_request): return errc::bad_request;
    case static_cast<std::uint8_t>(reply_status::busy): return errc::device_busy;
    default: return errc::device_error;
  }
}

}  // namespace vessel::bridges::uart
