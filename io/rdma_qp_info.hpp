#pragma once
// What two RC queue pairs must learn about each other before they can talk (qp number, address,
// starting packet sequence number, receive window), its fixed wire encoding, and the blocking
// exchange over a bootstrap fd. Independent of libibverbs, so it is testable without a device.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/result.hpp"

namespace vessel::io {

/// One side's half of an RC connection setup.
struct rdma_qp_info {
  std::uint32_t qp_num = 0;      ///< the QP number (24 bits)
  std::uint32_t psn = 0;         ///< first packet sequence number this side sends (24 bits)
  std::uint16_t lid = 0;         ///< port LID on InfiniBand; 0 on RoCE, where the GID addresses
  std::uint8_t port = 1;         ///< the HCA port in use
  std::uint8_t mtu = 0;          ///< enum ibv_mtu of the port's active MTU (1 = 256 .. 5 = 4096)
  std::array<std::uint8_t, 16> gid{};  ///< the port GID (RoCE: IPv4-mapped or link-local IPv6)
  std::uint32_t recv_depth = 0;  ///< receives this side keeps posted = the peer's send credits
  std::uint32_t max_message = 0; ///< bytes of each posted receive: the largest SEND it accepts

  friend bool operator==(const rdma_qp_info&, const rdma_qp_info&) = default;
};

/// Bytes of an encoded rdma_qp_info: magic, version, fields, all little-endian.
inline constexpr std::size_t rdma_qp_info_bytes = 44;

/// "VQPI" in little-endian: a peer that is not a vessel RDMA endpoint is refused at once.
inline constexpr std::uint32_t rdma_qp_info_magic = 0x49505156;
inline constexpr std::uint16_t rdma_qp_info_version = 1;

/// The fixed encoding of `info`.
std::array<std::byte, rdma_qp_info_bytes> encode_qp_info(const rdma_qp_info& info) noexcept;

/// Decodes and checks a peer's info: errc::handshake_failed for a wrong size, magic or version,
/// a qp_num or psn over 24 bits, an MTU outside 1..5, or a zero receive window or message size.
result<rdma_qp_info> decode_qp_info(std::span<const std::byte> bytes) noexcept;

/// Writes `mine` to the connected stream `fd` and reads the peer's (blocking, both directions at
/// once so that two peers calling it simultaneously cannot deadlock: the 44 bytes fit any socket
/// buffer). Never raises SIGPIPE. Errors: the socket's errno (EPIPE when the peer hung up),
/// errc::connection_closed on EOF, decode_qp_info's.
result<rdma_qp_info> exchange_qp_info(int fd, const rdma_qp_info& mine) noexcept;

}  // namespace vessel::io
