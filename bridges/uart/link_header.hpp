#pragma once
// The 2-byte header that every payload of a vessel UART link starts with (docs/uart.md §2), the
// host twin of bridges/uart/board/vessel_serial.h:
//   byte 0: type (bits 7..6) | seq (bits 5..0, mod 64)
//   byte 1: check = CRC-8/AUTOSAR over byte 0 and the body
// The check is a second polynomial behind the frame's CRC-8/SMBUS: a bogus candidate that the
// decoder finds inside a damaged frame passes both 1 time in ~65536 instead of 1 in 256.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/serial_frame.hpp"
#include "wire/serial_timing.hpp"

namespace vessel::bridges::uart {

/// What a link payload carries (bits 7..6 of its first byte).
enum class link_type : std::uint8_t {
  unreliable = 0,  ///< a datagram: delivered as is, never acked; seq 0
  data = 1,        ///< reliable data; seq = its sequence number
  ack = 2,         ///< cumulative ack; seq = the next sequence number expected
  syn = 3,         ///< a stream starts (1-byte session body), or with no body a SYN request
};

inline constexpr std::size_t link_header_bytes = 2;
/// Largest message behind the header: 251 bytes.
inline constexpr std::size_t link_max_message = wire::serial_max_payload - link_header_bytes;
inline constexpr unsigned link_seq_mod = 64;
/// Largest window: a valid seq is then never more than 8 from the one expected, so the halves of
/// the 64-circle tell duplicates (behind) from gaps (ahead) with a wide margin.
inline constexpr unsigned link_max_window = 8;
/// An ACK frame on the line: 0xAA, len 2, header, check, CRC.
inline constexpr std::size_t link_ack_frame_bytes = 5;

constexpr std::uint8_t link_header(link_type type, unsigned seq) noexcept {
  return static_cast<std::uint8_t>((static_cast<unsigned>(type) << 6) | (seq & (link_seq_mod - 1)));
}
constexpr link_type link_type_of(std::uint8_t header) noexcept {
  return static_cast<link_type>(header >> 6);
}
constexpr unsigned link_seq_of(std::uint8_t header) noexcept { return header & (link_seq_mod - 1); }

namespace detail {

consteval std::array<std::uint8_t, 256> make_crc8_autosar_table() noexcept {
  std::array<std::uint8_t, 256> table{};
  for (unsigned value = 0; value < 256; ++value) {
    unsigned crc = value;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x80u) != 0 ? ((crc << 1) ^ 0x2Fu) : (crc << 1);
    table[value] = static_cast<std::uint8_t>(crc & 0xFFu);
  }
  return table;
}
inline constexpr std::array<std::uint8_t, 256> crc8_autosar_table = make_crc8_autosar_table();

}  // namespace detail

/// CRC-8/AUTOSAR (poly 0x2F, init 0xFF, xorout 0xFF; check("123456789") = 0xDF) of `header`
/// followed by `body`: the link check of docs/uart.md. Table-driven here (the board is bitwise).
constexpr std::uint8_t link_check(std::uint8_t header, std::span<const std::byte> body) noexcept {
  std::uint8_t crc = detail::crc8_autosar_table[0xFFu ^ header];
  for (std::byte b : body) crc = detail::crc8_autosar_table[crc ^ static_cast<std::uint8_t>(b)];
  return static_cast<std::uint8_t>(crc ^ 0xFFu);
}

/// How long the sender waits for the ack of a frame of `frame_bytes` bytes on the line before it
/// resends the window: safety x frame_time(frame + ACK + peer_window x 256) + floor, the formula of
/// docs/uart.md §3 (the frame, its ack, and up to peer_window largest frames the peer may have
/// queued ahead of the ack), in ns where the board rounds up to whole ms (vsl_rto_ms). With the
/// defaults, 8N1, peer window 4: 256-byte frame 243.6 ms at 115200, 2697.9 ms at 9600.
constexpr std::chrono::nanoseconds retransmit_timeout(
    std::uint32_t baud, unsigned bits_per_char, std::size_t frame_bytes, unsigned peer_window = 4,
    std::chrono::nanoseconds floor = wire::serial_timeout_floor,
    unsigned safety_factor = wire::serial_timeout_safety_factor) noexcept {
  const std::size_t bytes = frame_bytes + link_ack_frame_bytes +
                            std::size_t{peer_window} * wire::serial_max_frame_bytes;
  return wire::serial_frame_time(baud, bits_per_char, bytes * safety_factor) + floor;
}

}  // namespace vessel::bridges::uart
