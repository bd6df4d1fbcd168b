#pragma once
// A chunk the receiver reads from the sender's memory instead of through the shared-memory
// ring (collective_engine, communicator.cpp): one copy instead of two, as Open MPI's vader does
// with process_vm_readv. The sender sends an offer under the collective's tag, with the chunk's
// header; the receiver pulls the bytes into the chunk's place and answers, pulled or refused;
// the sender holds the bytes until every offer is answered, and sends a refused chunk again the
// ordinary way. Only ranks on one host exchange these, so the layout is the host's.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "io/cross_memory.hpp"

namespace vessel::collectives {

/// In the chunk header's step: this message is an offer (a chunk_offer follows the header).
inline constexpr std::uint32_t chunk_offer_bit = std::uint32_t{1} << 31;
/// In the chunk header's step: this message answers an offer (a chunk_answer follows).
inline constexpr std::uint32_t chunk_answer_bit = std::uint32_t{1} << 30;
/// Steps an algorithm may use: the two bits above stay clear.
inline constexpr std::uint32_t chunk_step_mask = chunk_answer_bit - 1;

/// Where the offered bytes lie and which process holds them (io::pull_from_process).
struct chunk_offer {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t token_address = 0;
  std::uint64_t token[2] = {0, 0};
  std::int64_t pid = 0;

  static chunk_offer of(std::span<const std::byte> chunk, const io::process_token_offer& self) {
    chunk_offer o;
    o.address = reinterpret_cast<std::uintptr_t>(chunk.data());
    o.bytes = chunk.size();
    o.token_address = self.token_address;
    o.token[0] = self.token.words[0];
    o.token[1] = self.token.words[1];
    o.pid = self.pid;
    return o;
  }
  io::process_token_offer holder() const noexcept {
    io::process_token_offer h;
    h.pid = static_cast<pid_t>(pid);
    h.token_address = token_address;
    h.token.words = {token[0], token[1]};
    return h;
  }
};
static_assert(sizeof(chunk_offer) == 48);

enum class chunk_answer : std::uint64_t { pulled = 0, refused = 1 };

template <class T>
void put_plain(std::byte* at, const T& value) noexcept {
  std::memcpy(at, &value, sizeof value);
}
template <class T>
T get_plain(const std::byte* at) noexcept {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

}  // namespace vessel::collectives
