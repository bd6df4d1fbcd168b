#pragma once
// Helpers for the TCP transport tests: a reactor on its own thread, running work on it and waiting
// with a deadline (a broken transport fails the test instead of hanging it), plain blocking
// sockets for the peer side, and frame encoding.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "io/reactor.hpp"
#include "io/tcp_socket.hpp"
#include "io/transport.hpp"
#include "wire/frame_codec.hpp"

namespace vessel::io::test {

using namespace std::chrono_literals;

/// Sanitized builds are slower: scale volumes down there (and say so in the test names' docs).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#else
inline constexpr bool sanitized = false;
#endif
#if defined(__SANITIZE_THREAD__)
inline constexpr bool thread_sanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool thread_sanitized = true;
#else
inline constexpr bool thread_sanitized = false;
#endif
#else
inline constexpr bool thread_sanitized = false;
#endif
#ifdef NDEBUG
inline constexpr bool optimized = !sanitized;
#else
inline constexpr bool optimized = false;
#endif

/// A started reactor on its own thread; stopped (and joined) at the end of the scope.
class reactor_thread {
 public:
  reactor_thread() {
    auto r = reactor_.start();
    if (!r) throw std::runtime_error("reactor start: " + r.error().message());
  }
  ~reactor_thread() { reactor_.stop(); }
  reactor& get() noexcept { return reactor_; }

  /// Runs `fn` on the reactor thread and waits for its result (at most 10 s).
  template <class F>
  auto run(F fn) -> decltype(fn()) {
    using R = decltype(fn());
    auto done = std::make_shared<std::promise<R>>();
    auto fut = done->get_future();
    reactor_.dispatch([done, fn = std::move(fn)]() mutable {
      if constexpr (std::is_void_v<R>) {
        fn();
        done->set_value();
      } else {
        done->set_value(fn());
      }
    });
    if (fut.wait_for(10s) != std::future_status::ready) throw std::runtime_error("reactor stuck");
    return fut.get();
  }

 private:
  reactor reactor_{};
};

/// Waits for `fut` at most `timeout`; fails the test (and returns nullopt-like default) if late.
template <class T>
T wait_or_fail(std::future<T>& fut, std::chrono::milliseconds timeout = 10s) {
  if (fut.wait_for(timeout) != std::future_status::ready) {
    ADD_FAILURE() << "timed out after " << timeout.count() << " ms";
    throw std::runtime_error("timed out");
  }
  return fut.get();
}

/// A blocking socket listening on 127.0.0.1 at a port the kernel picked (SO_REUSEADDR): `fd` is
/// -1 when a step failed; `address` is where to connect.
struct plain_listener {
  int fd = -1;
  sockaddr_in address{};
  std::uint16_t port() const noexcept { return ntohs(address.sin_port); }
};

inline plain_listener plain_listen(int backlog = 8) {
  plain_listener l;
  l.address.sin_family = AF_INET;
  l.address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return l;
  const int one = 1;
  socklen_t len = sizeof l.address;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<const sockaddr*>(&l.address), sizeof l.address) != 0 ||
      ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&l.address), &len) != 0) {
    ::close(fd);
    return l;
  }
  l.fd = fd;
  return l;
}

/// A blocking socket connected to `address`, TCP_NODELAY; -1 on failure.
inline int plain_connect(const socket_address& address) {
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd, address.data(), address.length) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Writes all of `bytes`; false on error.
inline bool write_all(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

/// Reads exactly `out.size()` bytes; false on EOF or error.
inline bool read_all(int fd, std::span<std::byte> out) {
  while (!out.empty()) {
    const auto n = ::recv(fd, out.data(), out.size(), 0);
    if (n <= 0) return false;
    out = out.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

/// A data frame header for `payload_len` bytes tagged with `seq`.
inline wire::frame_header data_header(std::uint64_t seq, std::size_t payload_len) {
  wire::frame_header h;
  h.seq = seq;
  h.payload_len = static_cast<std::uint32_t>(payload_len);
  wire::data_fields d;
  d.tag = seq * 7;
  d.total_len = payload_len;
  h.body = d;
  return h;
}

/// Deterministic payload bytes for frame `seq`.
inline std::vector<std::byte> payload_for(std::uint64_t seq, std::size_t len) {
  std::vector<std::byte> p(len);
  std::uint64_t x = seq * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : p) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
  return p;
}

}  // namespace vessel::io::test
