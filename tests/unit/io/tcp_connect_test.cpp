// io/tcp_connector and io/tcp_listener: ephemeral ports, IPv4 and IPv6, refused vs timed out as
// typed errors, socket options, and re-dialling with backoff until a restarted listener is back.
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "io/errc.hpp"
#include "io/tcp_connector.hpp"
#include "io/tcp_listener.hpp"
#include "io/tcp_transport.hpp"
#include "tests/unit/io/tcp_test_support.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;
using test::reactor_thread;

/// A port on 127.0.0.1 that nobody listens on: bound (so nobody else takes it) but not listening.
struct unused_port {
  unused_port() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto a = socket_address::loopback_v4(0);
    EXPECT_EQ(::bind(fd, a.data(), a.length), 0);
    port = socket_address::local_of(fd).value().port();
  }
  ~unused_port() { ::close(fd); }
  int fd = -1;
  std::uint16_t port = 0;
};

/// Dials once and waits for the outcome.
result<int> dial(reactor_thread& rt, tcp_connector& c, const socket_address& to,
                 const connect_options& o) {
  auto done = std::make_shared<std::promise<result<int>>>();
  auto fut = done->get_future();
  rt.run([&] {
    auto r = c.connect(to, o, [done](result<int> fd) { done->set_value(fd); });
    EXPECT_TRUE(r);
  });
  return test::wait_or_fail(fut);
}

TEST(tcp_connect, listener_on_port_zero_reports_its_ephemeral_port_and_accepts) {
  reactor_thread rt;
  tcp_listener listener{rt.get()};
  ASSERT_TRUE(listener.listen(socket_address::loopback_v4(0)));
  EXPECT_NE(listener.port(), 0);
  EXPECT_EQ(listener.local_address().family(), AF_INET);

  std::promise<int> accepted;
  tcp_socket_options opts;
  opts.receive_buffer_bytes = 256u << 10;
  rt.run([&] {
    ASSERT_TRUE(listener.start(opts, [&](result<int> fd) {
      if (fd) accepted.set_value(fd.value());
    }));
  });
  tcp_connector connector{rt.get()};
  connect_options copts;
  copts.socket.send_buffer_bytes = 128u << 10;
  auto fd = dial(rt, connector, socket_address::loopback_v4(listener.port()), copts);
  ASSERT_TRUE(fd) << fd.error().message();
  auto acc_fut = accepted.get_future();
  const int server_fd = test::wait_or_fail(acc_fut);

  // Options reached both sockets: TCP_NODELAY by default, the buffer sizes asked for (the kernel
  // doubles what it is given for bookkeeping).
  int v = 0;
  socklen_t len = sizeof v;
  ASSERT_EQ(::getsockopt(fd.value(), IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
  EXPECT_NE(v, 0);
  ASSERT_EQ(::getsockopt(fd.value(), SOL_SOCKET, SO_SNDBUF, &v, &len), 0);
  EXPECT_EQ(v, 2 * (128 << 10));
  ASSERT_EQ(::getsockopt(server_fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
  EXPECT_NE(v, 0);
  ASSERT_EQ(::getsockopt(server_fd, SOL_SOCKET, SO_RCVBUF, &v, &len), 0);
  EXPECT_EQ(v, 2 * (256 << 10));

  // Bytes flow.
  const char msg[] = "hello";
  ASSERT_TRUE(test::write_all(fd.value(), std::as_bytes(std::span{msg})));
  char got[sizeof msg] = {};
  ASSERT_TRUE(test::read_all(server_fd, std::as_writable_bytes(std::span{got})));
  EXPECT_STREQ(got, msg);
  EXPECT_EQ(rt.run([&] { return listener.accepted(); }), 1u);
  ::close(fd.value());
  ::close(server_fd);

  // close() ends accepting once the cancelled accept has completed (the callback's final call).
  rt.run([&] { listener.close(); });
  for (int i = 0; i < 1000 && rt.run([&] { return listener.accepting(); }); ++i)
    std::this_thread::sleep_for(1ms);
  EXPECT_FALSE(rt.run([&] { return listener.accepting(); }));
  rt.get().stop();
}

TEST(tcp_connect, dialling_a_port_nobody_listens_on_fails_with_connection_refused) {
  reactor_thread rt;
  unused_port unused;
  tcp_connector connector{rt.get()};
  auto r = dial(rt, connector, socket_address::loopback_v4(unused.port), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(errc::connection_refused)) << r.error().message();
  rt.get().stop();
}

// A listener whose accept queue is full drops further SYNs (Linux, tcp_abort_on_overflow = 0), so
// a connect there never completes: the connector's deadline must end it as connect_timeout.
TEST(tcp_connect, dialling_a_listener_with_a_full_backlog_times_out_with_connect_timeout) {
  reactor_thread rt;
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto a = socket_address::loopback_v4(0);
  ASSERT_EQ(::bind(lfd, a.data(), a.length), 0);
  ASSERT_EQ(::listen(lfd, 0), 0);  // never accepted: the queue fills after one or two
  const auto addr = socket_address::local_of(lfd).value();
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    (void)::connect(fd, addr.data(), addr.length);  // EINPROGRESS or done: both fill the queue
    fillers.push_back(fd);
  }
  std::this_thread::sleep_for(20ms);

  tcp_connector connector{rt.get()};
  connect_options o;
  o.timeout = 200ms;
  const auto started = std::chrono::steady_clock::now();
  auto r = dial(rt, connector, addr, o);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(r) << "connected although the backlog was full";
  EXPECT_EQ(r.error(), make_error_code(errc::connect_timeout)) << r.error().message();
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 5s);
  for (int fd : fillers) ::close(fd);
  ::close(lfd);
  rt.get().stop();
}

TEST(tcp_connect, frames_flow_over_ipv6_loopback) {
  {
    const int probe = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) GTEST_SKIP() << "kernel has no IPv6 (socket(AF_INET6) failed)";
    auto a = socket_address::loopback_v6(0);
    const int rc = ::bind(probe, a.data(), a.length);
    ::close(probe);
    if (rc != 0) GTEST_SKIP() << "no IPv6 loopback address ::1 on this host";
  }
  // ::1 through the resolver, as a user would write it.
  auto resolved = resolve("::1", 0, AF_INET6);
  ASSERT_TRUE(resolved) << resolved.error().message();
  ASSERT_EQ(resolved.value().front().family(), AF_INET6);

  reactor_thread rt;
  tcp_listener listener{rt.get()};
  ASSERT_TRUE(listener.listen(resolved.value().front()));
  EXPECT_EQ(listener.local_address().to_string().rfind("[::1]:", 0), 0u)
      << listener.local_address().to_string();

  struct sink final : transport_handler {
    std::promise<std::vector<std::byte>> got;
    void on_frame(const wire::frame_header&, std::span<const std::byte> p,
                  const buffer_slice&) override {
      got.set_value({p.begin(), p.end()});
    }
    void on_closed(std::error_code) override {}
  } server_handler, client_handler;
  std::unique_ptr<tcp_transport> server, client;
  tcp_connector connector{rt.get()};
  const auto payload = test::payload_for(6, 300);
  rt.run([&] {
    ASSERT_TRUE(listener.start({}, [&](result<int> fd) {
      if (!fd) return;
      server = std::make_unique<tcp_transport>(rt.get(), fd.value(), server_handler);
      server->start();
    }));
    auto to = socket_address::loopback_v6(listener.port());
    ASSERT_TRUE(connector.connect(to, {}, [&](result<int> fd) {
      ASSERT_TRUE(fd) << fd.error().message();
      client = std::make_unique<tcp_transport>(rt.get(), fd.value(), client_handler);
      client->start();
      ASSERT_TRUE(client->send_copy(test::data_header(6, payload.size()), payload));
    }));
  });
  auto fut = server_handler.got.get_future();
  EXPECT_EQ(test::wait_or_fail(fut), payload);
  rt.get().stop();
}

// The listener goes away (socket closed, connection dropped) and comes back on the same port
// later; the client re-dials with backoff through the refusals and gets through.
TEST(tcp_connect, redials_with_backoff_until_a_restarted_listener_accepts) {
  reactor_thread rt;
  struct sink final : transport_handler {
    std::promise<std::error_code> closed;
    std::promise<void> got;
    void on_frame(const wire::frame_header&, std::span<const std::byte>,
                  const buffer_slice&) override {
      got.set_value();
    }
    void on_closed(std::error_code ec) override { closed.set_value(ec); }
  };
  auto listener = std::make_unique<tcp_listener>(rt.get());
  ASSERT_TRUE(listener->listen(socket_address::loopback_v4(0)));
  const auto port = listener->port();
  sink server_handler1, client_handler1;
  std::unique_ptr<tcp_transport> server1, client1;
  std::promise<void> listener_gone;
  tcp_connector connector{rt.get()};
  rt.run([&] {
    ASSERT_TRUE(listener->start({}, [&](result<int> fd) {
      if (!fd) {
        listener_gone.set_value();
        return;
      }
      server1 = std::make_unique<tcp_transport>(rt.get(), fd.value(), server_handler1);
      server1->start();
    }));
    ASSERT_TRUE(connector.connect(socket_address::loopback_v4(port), {}, [&](result<int> fd) {
      ASSERT_TRUE(fd);
      client1 = std::make_unique<tcp_transport>(rt.get(), fd.value(), client_handler1);
      client1->start();
    }));
  });
  for (int i = 0; i < 1000 && !rt.run([&] { return server1 != nullptr; }); ++i)
    std::this_thread::sleep_for(1ms);

  // The server side goes down: listener and connection.
  rt.run([&] {
    listener->close();
    server1->close();
  });
  auto gone = listener_gone.get_future();
  test::wait_or_fail(gone);
  auto c1_closed = client_handler1.closed.get_future();
  EXPECT_EQ(test::wait_or_fail(c1_closed), make_error_code(errc::connection_closed));
  rt.run([&] { listener.reset(); });

  // The client re-dials at once; for ~300 ms nobody listens (refused), then the listener is back.
  reconnect_policy policy;
  policy.initial_delay = 10ms;
  policy.max_delay = 80ms;
  policy.max_attempts = 200;
  sink client_handler2, server_handler2;
  std::unique_ptr<tcp_transport> server2, client2;
  std::promise<std::uint32_t> reconnected;
  rt.run([&] {
    ASSERT_TRUE(connector.connect_with_retry({socket_address::loopback_v4(port)}, {}, policy, 99,
                                             [&](result<int> fd) {
      ASSERT_TRUE(fd) << fd.error().message();
      client2 = std::make_unique<tcp_transport>(rt.get(), fd.value(), client_handler2);
      client2->start();
      const std::byte b[1] = {std::byte{1}};
      ASSERT_TRUE(client2->send_copy(test::data_header(1, 1), b));
      reconnected.set_value(connector.attempts());
    }));
  });
  std::this_thread::sleep_for(300ms);
  tcp_listener listener2{rt.get()};
  ASSERT_TRUE(listener2.listen(socket_address::loopback_v4(port)))
      << "port " << port << " not reusable";
  rt.run([&] {
    ASSERT_TRUE(listener2.start({}, [&](result<int> fd) {
      if (!fd) return;
      server2 = std::make_unique<tcp_transport>(rt.get(), fd.value(), server_handler2);
      server2->start();
    }));
  });
  auto rec = reconnected.get_future();
  const auto attempts = test::wait_or_fail(rec, 5s);
  EXPECT_GT(attempts, 2u) << "should have been refused while the listener was down";
  auto got = server_handler2.got.get_future();
  test::wait_or_fail(got);
  rt.get().stop();
}

TEST(tcp_connect, gives_up_with_the_last_error_when_the_policy_runs_out) {
  reactor_thread rt;
  unused_port unused;
  tcp_connector connector{rt.get()};
  reconnect_policy policy;
  policy.initial_delay = 1ms;
  policy.max_delay = 4ms;
  policy.max_attempts = 3;
  std::promise<result<int>> done;
  rt.run([&] {
    ASSERT_TRUE(connector.connect_with_retry({socket_address::loopback_v4(unused.port)}, {},
                                             policy, 1, [&](result<int> r) { done.set_value(r); }));
  });
  auto fut = done.get_future();
  auto r = test::wait_or_fail(fut);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(errc::connection_refused));
  EXPECT_EQ(rt.run([&] { return connector.attempts(); }), 4u);  // the first + 3 retries
  rt.get().stop();
}

TEST(tcp_connect, cancel_during_backoff_reports_operation_canceled) {
  reactor_thread rt;
  unused_port unused;
  tcp_connector connector{rt.get()};
  reconnect_policy policy;
  policy.initial_delay = 10s;  // parked in the backoff wait
  policy.jitter = false;
  std::promise<result<int>> done;
  rt.run([&] {
    ASSERT_TRUE(connector.connect_with_retry({socket_address::loopback_v4(unused.port)}, {},
                                             policy, 1, [&](result<int> r) { done.set_value(r); }));
  });
  std::this_thread::sleep_for(50ms);
  rt.run([&] { connector.cancel(); });
  auto fut = done.get_future();
  auto r = test::wait_or_fail(fut, 1s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::make_error_code(std::errc::operation_canceled));
  EXPECT_FALSE(rt.run([&] { return connector.busy(); }));
  rt.get().stop();
}

}  // namespace
}  // namespace vessel::io
