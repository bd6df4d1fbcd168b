#pragma once
// Socket addresses and socket options shared by the TCP connector and listener. Name resolution
// (getaddrinfo) blocks, so it is a separate step that the caller runs off the reactor thread; the
// reactor only ever sees resolved addresses.

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wire/result.hpp"

namespace vessel::io {

/// An IPv4 or IPv6 socket address, by value (outlives any SQE that points at it when it is a
/// member of the op's owner).
struct socket_address {
  sockaddr_storage storage{};
  socklen_t length = 0;

  /// 127.0.0.1:port.
  static socket_address loopback_v4(std::uint16_t port) noexcept;
  /// [::1]:port.
  static socket_address loopback_v6(std::uint16_t port) noexcept;
  /// 0.0.0.0:port (v4) or [::]:port (v6): every interface.
  static socket_address any(int family, std::uint16_t port) noexcept;
  /// The local address of a bound or connected socket.
  static result<socket_address> local_of(int fd) noexcept;
  /// The address a connected socket's peer has.
  static result<socket_address> peer_of(int fd) noexcept;

  int family() const noexcept { return storage.ss_family; }
  std::uint16_t port() const noexcept;
  const sockaddr* data() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
  /// "127.0.0.1:80" or "[::1]:80".
  std::string to_string() const;
};

/// Resolves `host` (name or literal; IPv4 and IPv6) and `port` with getaddrinfo. BLOCKS (DNS):
/// call it from a setup thread, never on a reactor. `family` AF_UNSPEC returns both families in
/// the resolver's preferred order. Errors: std::errc::host_unreachable-style codes from EAI_*.
result<std::vector<socket_address>> resolve(std::string_view host, std::uint16_t port,
                                            int family = AF_UNSPEC);

/// Per-socket settings applied before connect and to every accepted socket.
struct tcp_socket_options {
  bool no_delay = true;  ///< TCP_NODELAY: frames are coalesced by the send queue, not by Nagle
  int send_buffer_bytes = 0;     ///< SO_SNDBUF; 0 keeps the kernel's (auto-tuned) default
  int receive_buffer_bytes = 0;  ///< SO_RCVBUF; 0 keeps the kernel's (auto-tuned) default
  /// TCP_USER_TIMEOUT: sent data unacknowledged this long ends the connection with ETIMEDOUT,
  /// reported as errc::peer_timeout; 0 keeps the kernel's (minutes of retransmissions).
  std::chrono::milliseconds user_timeout{0};
};

/// Applies `options` to `fd`; the first failing setsockopt's errno as a std::error_code.
result<void> apply_socket_options(int fd, const tcp_socket_options& options) noexcept;

}  // namespace vessel::io
