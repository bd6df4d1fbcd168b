// A tcp_transport treats a peer on this host as such, decided per socket: its sends never use
// SEND_ZC, and its congestion control paces nothing.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <optional>
#include <span>
#include <string>

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

// The first IPv4 address of an interface that is up and not loopback, if this host has one.
std::optional<std::string> own_non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (const ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                sizeof text);
    found = text;
  }
  ::freeifaddrs(list);
  return found;
}

std::string system_congestion_control() {
  std::ifstream in{"/proc/sys/net/ipv4/tcp_congestion_control"};
  std::string name;
  in >> name;
  return name;
}

TEST(tcp_local_peer, loopback_and_unix_peers_are_recognised_as_local) {
  auto v4 = connected_pair(AF_INET, "127.0.0.1");
  ASSERT_GE(v4[0], 0);
  EXPECT_TRUE(peer_is_on_this_host(v4[0]));
  EXPECT_TRUE(peer_is_on_this_host(v4[1]));
  auto v4_other = connected_pair(AF_INET, "127.0.0.2");  // all of 127/8 is loopback
  ASSERT_GE(v4_other[0], 0);
  EXPECT_TRUE(peer_is_on_this_host(v4_other[0]));
  std::array<int, 2> un{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, un.data()), 0);
  EXPECT_TRUE(peer_is_on_this_host(un[0]));
  const int unconnected = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_FALSE(peer_is_on_this_host(unconnected)) << "no peer at all is not a local peer";
  for (int fd : {v4[0], v4[1], v4_other[0], v4_other[1], un[0], un[1], unconnected}) ::close(fd);

  auto v6 = connected_pair(AF_INET6, "::1");
  if (v6[0] < 0) GTEST_SKIP() << "no IPv6 loopback interface on this host";
  EXPECT_TRUE(peer_is_on_this_host(v6[0]));
  ::close(v6[0]);
  ::close(v6[1]);
}

TEST(tcp_local_peer, a_peer_reached_through_an_address_of_this_host_is_local) {
  const auto own = own_non_loopback_ipv4();
  if (!own) GTEST_SKIP() << "this host has no non-loopback IPv4 interface that is up";
  auto pair = connected_pair(AF_INET, own->c_str());
  ASSERT_GE(pair[0], 0) << "cannot listen on " << *own;
  EXPECT_TRUE(peer_is_on_this_host(pair[0])) << *own;
  EXPECT_TRUE(peer_is_on_this_host(pair[1])) << *own;
  ::close(pair[0]);
  ::close(pair[1]);
}

TEST(tcp_local_peer, a_transport_to_a_local_peer_switches_to_its_local_congestion_control) {
  reactor r{testing::driven(true)};
  ASSERT_TRUE(r.start());
  null_handler h;
  const std::string system = system_congestion_control();
  ASSERT_FALSE(system.empty());
  {
    auto pair = connected_pair(AF_INET, "127.0.0.1");
    ASSERT_GE(pair[0], 0);
    tcp_transport dialled{r, pair[0], h};
    tcp_transport accepted{r, pair[1], h};
    EXPECT_EQ(dialled.congestion_control(), "reno") << "the system's is " << system;
    EXPECT_EQ(accepted.congestion_control(), "reno");
  }
  {
    auto pair = connected_pair(AF_INET, "127.0.0.1");
    ASSERT_GE(pair[0], 0);
    tcp_transport_options keep;
    keep.local_congestion_control = "";
    tcp_transport dialled{r, pair[0], h, keep};
    EXPECT_EQ(dialled.congestion_control(), system) << "empty keeps the system's";
    tcp_transport_options unknown;
    unknown.local_congestion_control = "no-such-algorithm";
    tcp_transport accepted{r, pair[1], h, unknown};
    EXPECT_EQ(accepted.congestion_control(), system) << "a name the kernel refuses changes nothing";
    EXPECT_TRUE(accepted.is_open());
  }
  {
    std::array<int, 2> un{};
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, un.data()), 0);
    tcp_transport local{r, un[0], h};
    EXPECT_EQ(local.congestion_control(), "") << "a unix socket has none";
    ::close(un[1]);
  }
  r.stop();
  r.run();
}

TEST(tcp_local_peer, a_transport_to_a_loopback_peer_never_sends_zero_copy) {
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
