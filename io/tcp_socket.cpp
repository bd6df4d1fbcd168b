#include "io/tcp_socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <cstring>

namespace vessel::io {
namespace {

std::error_code last_errno() noexcept { return {errno, std::generic_category()}; }

/// One end of a socket's address, read with getsockname (ours) or getpeername (the peer's).
result<socket_address> end_of(int fd, int (*read_end)(int, sockaddr*, socklen_t*)) noexcept {
  socket_address a;
  a.length = sizeof a.storage;
  if (read_end(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) return last_errno();
  return a;
}

}  // namespace

socket_address socket_address::loopback_v4(std::uint16_t port) noexcept {
  socket_address a;
  auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.length = sizeof(sockaddr_in);
  return a;
}

socket_address socket_address::loopback_v6(std::uint16_t port) noexcept {
  socket_address a;
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  in6->sin6_addr = in6addr_loopback;
  a.length = sizeof(sockaddr_in6);
  return a;
}

socket_address socket_address::any(int family, std::uint16_t port) noexcept {
  socket_address a;
  if (family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    in6->sin6_addr = in6addr_any;
    a.length = sizeof(sockaddr_in6);
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    in->sin_addr.s_addr = htonl(INADDR_ANY);
    a.length = sizeof(sockaddr_in);
  }
  return a;
}

result<socket_address> socket_address::local_of(int fd) noexcept {
  return end_of(fd, ::getsockname);
}

result<socket_address> socket_address::peer_of(int fd) noexcept {
  return end_of(fd, ::getpeername);
}

std::uint16_t socket_address::port() const noexcept {
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  return 0;
}

std::string socket_address::to_string() const {
  char host[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host,
                sizeof host);
    return std::string("[") + host + "]:" + std::to_string(port());
  }
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host,
                sizeof host);
    return std::string(host) + ":" + std::to_string(port());
  }
  return "<unspecified>";
}

result<std::vector<socket_address>> resolve(std::string_view host, std::uint16_t port,
                                            int family) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
  const std::string host_z(host);
  const std::string port_z = std::to_string(port);
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(host_z.c_str(), port_z.c_str(), &hints, &list);
  if (rc == EAI_ADDRFAMILY || (rc == EAI_NONAME && family != AF_UNSPEC)) {
    // AI_ADDRCONFIG hides ::1 on hosts whose only IPv6 address is loopback; ask again without it.
    hints.ai_flags = AI_NUMERICSERV;
    rc = ::getaddrinfo(host_z.c_str(), port_z.c_str(), &hints, &list);
  }
  if (rc != 0) {
    if (rc == EAI_SYSTEM) return last_errno();
    if (rc == EAI_MEMORY) return std::make_error_code(std::errc::not_enough_memory);
    if (rc == EAI_AGAIN) return std::make_error_code(std::errc::resource_unavailable_try_again);
    return std::make_error_code(std::errc::address_not_available);  // EAI_NONAME and friends
  }
  std::vector<socket_address> out;
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    socket_address a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = ai->ai_addrlen;
    out.push_back(a);
  }
  ::freeaddrinfo(list);
  if (out.empty()) return std::make_error_code(std::errc::address_not_available);
  return out;
}

result<void> apply_socket_options(int fd, const tcp_socket_options& options) noexcept {
  const int one = 1;
  if (options.no_delay && ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return last_errno();
  if (options.send_buffer_bytes > 0 &&
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options.send_buffer_bytes,
                   sizeof options.send_buffer_bytes) != 0)
    return last_errno();
  if (options.receive_buffer_bytes > 0 &&
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &options.receive_buffer_bytes,
                   sizeof options.receive_buffer_bytes) != 0)
    return last_errno();
  if (options.user_timeout.count() > 0) {
    const unsigned ms = static_cast<unsigned>(options.user_timeout.count());
    if (::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) != 0) return last_errno();
  }
  return outcome::success();
}

}  // namespace vessel::io
