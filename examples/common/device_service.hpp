#pragma once
// What the device examples share (uart_board, ble_sensor): one rank owns a device and serves it
// to the others over point-to-point messages. Requests go to the owner with request_tag, replies
// come back with reply_tag (0 | result, or 1 | the error as text); an empty request says that
// its sender is done, and the owner stops once every other rank is.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "actors/comm.hpp"

namespace vessel::examples {

inline constexpr std::uint64_t request_tag = 1;
inline constexpr std::uint64_t reply_tag = 2;

inline std::vector<std::byte> le32(std::uint32_t v) {
  return {std::byte(v & 0xFF), std::byte((v >> 8) & 0xFF), std::byte((v >> 16) & 0xFF),
          std::byte(v >> 24)};
}
inline std::uint32_t get32(const std::byte* b) {
  return static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) |
         (static_cast<std::uint32_t>(b[2]) << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
}

/// A failed reply: 1 | `text`.
inline std::vector<std::byte> error_reply(const std::string& text) {
  std::vector<std::byte> out{std::byte{1}};
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

/// A reply's error text (everything after its status byte).
inline std::string reply_text(std::span<const std::byte> reply) {
  std::string text;
  for (std::size_t i = 1; i < reply.size(); ++i) text.push_back(static_cast<char>(reply[i]));
  return text;
}

/// The lowest rank that has a device (collective: every rank calls it), or nullopt if none has.
inline std::optional<std::uint32_t> device_owner(comm& world, bool has_device) {
  std::uint64_t owner = has_device ? world.rank() : world.size();
  world.allreduce(std::span<std::uint64_t>{&owner, 1}, reduce_op::min);
  if (owner == world.size()) return std::nullopt;
  return static_cast<std::uint32_t>(owner);
}

/// The owner's loop: answers each request with `answer(request)` until every other rank said it
/// is done. Returns the number of requests answered.
template <class Answer>
std::uint32_t serve_until_done(comm& world, Answer&& answer) {
  std::uint32_t done = 0;
  std::uint32_t served = 0;
  while (done + 1 < world.size()) {
    recv_status st;
    auto msg = world.recv(any_source, request_tag, no_timeout, &st);
    if (msg.empty()) {
      ++done;
      continue;
    }
    world.send(answer(std::span<const std::byte>{msg}), st.source, reply_tag);
    ++served;
  }
  return served;
}

/// A user rank's last message to the owner.
inline void say_done(comm& world, std::uint32_t owner) {
  world.send(std::span<const std::byte>{}, owner, request_tag);
}

}  // namespace vessel::examples
