// A tcp_transport decides per socket whether its sends may use SEND_ZC: never to a local peer.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <span>

#include "io/reactor.hpp"
#include "io/tcp_transport.hpp"
#include "tests/unit/io/reactor_test_support.hpp"

namespace vessel::io {
namespace {

struct null_handler final : transport_handler {
  void on_frame(const wire::frame_header&, std::span<const std::byte>, const buffer_slice&) override {}
  void on_writable() override {}
  void on_closed(std::error_code) override {}
};

// Connects a fresh socket of `family` to a listener on `loopback`; returns {client, server}, or
// {-1, -1} when the family is unavailable here.
std::array<int, 2> connected_pair(int family, const char* loopback) {
  const int lfd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) return {-1, -1};
  sockaddr_storage a{};
  socklen_t len = 0;
  if (family == AF_INET) {
    auto& in = reinterpret_cast<sockaddr_in&>(a);
    in.sin_family = AF_INET;
    ::inet_pton(AF_INET, loopback, &in.sin_addr);
    len = sizeof in;
  } else {
    auto& in6 = reinterpret_cast<sockaddr_in6&>(a);
    in6.sin6_family = AF_INET6;
    ::inet_pton(AF_INET6, loopback, &in6.sin6_addr);
    len = sizeof in6;
  }
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if (::bind(lfd, sa, len) != 0 || ::listen(lfd, 1) != 0 || ::getsockname(lfd, sa, &len) != 0) {
    ::close(lfd);
    return {-1, -1};
  }
  const int c = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::connect(c, sa, len), 0);
  const int s = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(lfd);
  return {c, s};
}

TEST(tcp_zero_copy, loopback_and_unix_peers_are_recognised_as_local) {
  auto v4 = connected_pair(AF_INET, "127.0.0.1");
  ASSERT_GE(v4[0], 0);
  EXPECT_TRUE(peer_is_loopback(v4[0]));
  EXPECT_TRUE(peer_is_loopback(v4[1]));
  auto v4_other = connected_pair(AF_INET, "127.0.0.2");  // all of 127/8 is loopback
  ASSERT_GE(v4_other[0], 0);
  EXPECT_TRUE(peer_is_loopback(v4_other[0]));
  std::array<int, 2> un{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, un.data()), 0);
  EXPECT_TRUE(peer_is_loopback(un[0]));
  const int unconnected = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_FALSE(peer_is_loopback(unconnected)) << "no peer at all is not a local peer";
  for (int fd : {v4[0], v4[1], v4_other[0], v4_other[1], un[0], un[1], unconnected}) ::close(fd);

  auto v6 = connected_pair(AF_INET6, "::1");
  if (v6[0] < 0) GTEST_SKIP() << "no IPv6 loopback interface on this host";
  EXPECT_TRUE(peer_is_loopback(v6[0]));
  ::close(v6[0]);
  ::close(v6[1]);
}

TEST(tcp_zero_copy, a_transport_to_a_loopback_peer_never_sends_zero_copy) {
  reactor r{testing::driven(true)};
  ASSERT_TRUE(r.start());
  null_handler h;
  auto pair = connected_pair(AF_INET, "127.0.0.1");
  ASSERT_GE(pair[0], 0);
  tcp_transport_options options;
  options.send_zero_copy = zero_copy::when_large;  // asked for, and still refused: the peer is local
  {
    tcp_transport client{r, pair[0], h, options};
    EXPECT_EQ(client.send_zero_copy(), zero_copy::never);
    std::array<int, 2> un{};
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, un.data()), 0);
    tcp_transport local{r, un[0], h, options};
    EXPECT_EQ(local.send_zero_copy(), zero_copy::never);
    ::close(un[1]);
  }
  ::close(pair[1]);
  r.stop();
  r.run();
}

}  // namespace
}  // namespace vessel::io
