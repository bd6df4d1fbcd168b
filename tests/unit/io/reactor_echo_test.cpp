// TCP echo over loopback, entirely on one driven reactor: accept, connect, send, recv. Run with the
// better kernel paths (multishot accept and recv, buffer ring, SEND_ZC) and with all fallbacks.

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/buffer_ring.hpp"
#include "io/reactor.hpp"
#include "tests/unit/io/reactor_test_support.hpp"
#include "tests/unit/io/tcp_test_support.hpp"

namespace vessel::io {
namespace {

using testing::fn_op;

// Echoes whatever it receives; one send in flight at a time (DEPENDENCIES.md §2), the rest queued.
struct echo_server {
  echo_server(reactor& owner, buffer_ring* buffers) : r(owner), ring(buffers) {}
  reactor& r;
  buffer_ring* ring;  // null: plain recv into own buffer
  int fd = -1;
  std::vector<std::byte> queued, sending;
  std::size_t sent = 0;
  std::byte buf[4096] = {};
  int recv_errors = 0;
  fn_op recv_op{[this](int res, std::uint32_t flags) { on_recv(res, flags); }};
  fn_op send_op{[this](int res, std::uint32_t flags) { on_send(res, flags); }};

  void arm_recv() {
    if (ring != nullptr) r.recv(recv_op, fd, *ring);
    else r.recv(recv_op, fd, buf);
  }
  void on_recv(int res, std::uint32_t flags) {
    if (res <= 0) {
      if (res != 0 && res != -ECANCELED && res != -ENOBUFS) ++recv_errors;
      if (res == -ENOBUFS) arm_recv();
      return;
    }
    if (ring != nullptr) {
      const auto id = static_cast<std::uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT);
      auto data = ring->data(id, static_cast<std::size_t>(res));
      queued.insert(queued.end(), data.begin(), data.end());
      ring->recycle(id);
    } else {
      queued.insert(queued.end(), buf, buf + res);
    }
    if ((flags & IORING_CQE_F_MORE) == 0) arm_recv();
    flush();
  }
  void flush() {
    if (send_op.in_flight() || queued.empty()) return;
    sending.swap(queued);
    queued.clear();
    sent = 0;
    r.send(send_op, fd, sending);
  }
  void on_send(int res, std::uint32_t flags) {
    if (res > 0) sent += static_cast<std::size_t>(res);
    if ((flags & IORING_CQE_F_MORE) != 0) return;  // SEND_ZC: buffer pinned until the notification
    if (res < 0 && res != 0) return;
    if (sent < sending.size()) {  // partial send: the rest goes next
      r.send(send_op, fd, std::span<const std::byte>{sending}.subspan(sent));
      sending.erase(sending.begin(), sending.begin() + static_cast<std::ptrdiff_t>(sent));
      sent = 0;
      return;
    }
    sending.clear();
    flush();
  }
};

struct echo_case {
  bool better;
  bool use_buffer_ring;
  std::size_t message_bytes;
};

class reactor_echo : public ::testing::TestWithParam<echo_case> {};

TEST_P(reactor_echo, echo_over_loopback_tcp_returns_every_byte_in_order) {
  const auto param = GetParam();
  const test::plain_listener listening = test::plain_listen(4);
  ASSERT_GE(listening.fd, 0) << "socket, bind, listen or getsockname on 127.0.0.1 failed";
  const int listener = listening.fd;
  const sockaddr_in addr = listening.address;
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  std::vector<std::byte> message(param.message_bytes);
  for (std::size_t i = 0; i < message.size(); ++i) message[i] = std::byte(i * 131 % 251);
  std::vector<std::byte> echoed;
  std::vector<std::byte> client_buf(65536);
  std::size_t client_sent = 0;
  int accepted = 0, connect_res = 1, client_errors = 0, zc_notifications = 0;
  bool send_done = false;

  reactor r{testing::driven(param.better)};
  ASSERT_TRUE(r.start());
  std::unique_ptr<buffer_ring> ring;
  if (param.use_buffer_ring) {
    auto created = buffer_ring::create(r, 7, 64, 4096);
    if (!created) GTEST_SKIP() << "kernel has no provided-buffer rings";
    ring = std::move(created).value();
  }
  echo_server server{r, ring.get()};

  // Handlers refer to their own ops, so they are set after the ops exist.
  std::function<void(int, std::uint32_t)> on_client_recv, on_client_send, on_accept;
  fn_op client_recv{[&](int res, std::uint32_t flags) { on_client_recv(res, flags); }};
  fn_op client_send{[&](int res, std::uint32_t flags) { on_client_send(res, flags); }};
  fn_op accept_op{[&](int res, std::uint32_t flags) { on_accept(res, flags); }};
  on_client_recv = [&](int res, std::uint32_t) {
    if (res <= 0) {
      if (res != -ECANCELED) ++client_errors;
      return;
    }
    echoed.insert(echoed.end(), client_buf.begin(), client_buf.begin() + res);
    if (echoed.size() < message.size()) r.recv(client_recv, client, client_buf);
  };
  on_client_send = [&](int res, std::uint32_t flags) {
    if ((flags & IORING_CQE_F_NOTIF) != 0) ++zc_notifications;
    else if (res > 0) client_sent += static_cast<std::size_t>(res);
    if (res < 0) ++client_errors;
    if ((flags & IORING_CQE_F_MORE) != 0) return;
    if (client_sent < message.size()) {
      r.send(client_send, client, std::span<const std::byte>{message}.subspan(client_sent));
    } else {
      send_done = true;
    }
  };
  on_accept = [&](int res, std::uint32_t flags) {
    if (res >= 0) {
      ++accepted;
      server.fd = res;
      server.arm_recv();
    }
    if ((flags & IORING_CQE_F_MORE) == 0 && res != -ECANCELED) r.accept(accept_op, listener);
  };
  fn_op connect_op{[&](int res, std::uint32_t) {
    connect_res = res;
    if (res != 0) return;
    r.send(client_send, client, message);
    r.recv(client_recv, client, client_buf);
  }};

  r.accept(accept_op, listener);
  r.connect(connect_op, client, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  EXPECT_TRUE(testing::run_until(r, [&] {
    return (echoed.size() >= message.size() && send_done) || client_errors > 0 || connect_res < 0;
  }));
  EXPECT_EQ(connect_res, 0);
  EXPECT_EQ(accepted, 1);
  EXPECT_EQ(client_errors, 0);
  EXPECT_EQ(server.recv_errors, 0);
  EXPECT_TRUE(echoed == message) << "echoed " << echoed.size() << " of " << message.size();
  EXPECT_EQ(r.features().multishot_accept, param.better);
  const bool zero_copy = r.features().send_zc && message.size() >= r.config().zero_copy_threshold;
  EXPECT_EQ(zc_notifications > 0, zero_copy);  // the SEND_ZC path really ran, or really did not

  r.stop();
  r.run();  // cancels the parked accept and recvs
  EXPECT_FALSE(accept_op.in_flight());
  EXPECT_FALSE(server.recv_op.in_flight());
  ring.reset();
  ::close(server.fd);
  ::close(client);
  ::close(listener);
}

INSTANTIATE_TEST_SUITE_P(
    paths, reactor_echo,
    ::testing::Values(echo_case{true, false, 64}, echo_case{true, true, 64},
                      echo_case{true, true, 256 * 1024},  // large: SEND_ZC, many buffers
                      echo_case{false, false, 64}, echo_case{false, false, 256 * 1024}),
    [](const auto& p) {
      return std::string(p.param.better ? "better" : "fallback") +
             (p.param.use_buffer_ring ? "_buffer_ring_" : "_plain_") +
             std::to_string(p.param.message_bytes);
    });

TEST(reactor_features, fallback_config_turns_every_optional_path_off) {
  reactor r{testing::driven(false)};
  ASSERT_TRUE(r.start());
  EXPECT_EQ(r.features(), uring_features::none());
  auto ring = buffer_ring::create(r, 1, 8, 64);
  EXPECT_FALSE(ring);  // buffer rings are a better path: refused when not allowed
}

TEST(reactor_features, probe_reports_what_the_kernel_offers_and_prints_it) {
  reactor r{testing::driven(true)};
  ASSERT_TRUE(r.start());
  const auto f = r.features();
  const auto text = f.to_string();
  EXPECT_NE(text.find("send_zc="), std::string::npos);
  EXPECT_NE(text.find("multishot_accept="), std::string::npos);
  // Consistency of the inferences: multishot recv needs buffer rings.
  if (f.multishot_recv) {
    EXPECT_TRUE(f.buffer_ring);
  }
  EXPECT_EQ(f & uring_features::none(), uring_features::none());
}

}  // namespace
}  // namespace vessel::io
