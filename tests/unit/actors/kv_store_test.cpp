// The rendezvous key-value store: a server on its own reactor thread, clients on test threads.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "actors/errc.hpp"
#include "actors/kv_store_client.hpp"
#include "actors/kv_store_server.hpp"
#include "io/reactor.hpp"
#include "io/tcp_listener.hpp"
#include "tests/unit/io/tcp_test_support.hpp"
#include "wire/frame_codec.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

std::string text(const std::vector<std::byte>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size()};
}

// Runs `fn` on `r`'s thread and returns its result.
template <class F>
auto on_reactor(io::reactor& r, F fn) {
  std::packaged_task<decltype(fn())()> task{fn};
  auto f = task.get_future();
  r.post([&task] { task(); });
  return f.get();
}

// A port nobody listens on right now: bound, read, released.
std::uint16_t free_port() {
  io::reactor r{io::reactor_config{}};
  io::tcp_listener l{r};
  EXPECT_TRUE(l.listen(io::socket_address::loopback_v4(0)));
  return l.port();
}

// A reactor thread serving a store on 127.0.0.1.
struct served_store {
  explicit served_store(kv_store_limits limits = {}, std::uint16_t port = 0) : server{r, limits} {
    EXPECT_TRUE(r.start());
    auto listened = server.listen(io::socket_address::loopback_v4(port));
    EXPECT_TRUE(listened) << listened.error().message();
    EXPECT_TRUE(server.start());
  }
  ~served_store() {
    server.stop();
    r.stop();
  }
  endpoint address() const { return {"127.0.0.1", server.port()}; }
  kv_store_server_stats stats() { return on_reactor(r, [this] { return server.stats(); }); }
  std::size_t clients() { return on_reactor(r, [this] { return server.clients(); }); }

  io::reactor r;
  kv_store_server server;
};

std::unique_ptr<kv_store_client> dial(const endpoint& at, kv_store_client_options o = {}) {
  auto c = kv_store_client::connect(at, 5s, o);
  EXPECT_TRUE(c) << (c ? "" : c.error().message());
  return c ? std::move(c).value() : nullptr;
}

TEST(KvStore, SetOnOneClientIsSeenByGetOnAnother) {
  served_store s;
  auto a = dial(s.address());
  auto b = dial(s.address());
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->set("rank0/addr", "10.0.0.1:4000"));
  auto got = b->get("rank0/addr");
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(text(got.value()), "10.0.0.1:4000");
  // Replacing a value, and erasing it.
  ASSERT_TRUE(b->set("rank0/addr", "10.0.0.2:4000"));
  EXPECT_EQ(text(a->get("rank0/addr").value()), "10.0.0.2:4000");
  ASSERT_TRUE(a->erase("rank0/addr"));
  EXPECT_EQ(b->get("rank0/addr").error().code, errc::store_key_not_found);
}

TEST(KvStore, GetOfAnAbsentKeyFailsAtOnceNamingTheKeyAndAddress) {
  served_store s;
  auto c = dial(s.address());
  ASSERT_TRUE(c);
  const auto began = clock::now();
  auto got = c->get("missing/key");
  ASSERT_FALSE(got);
  EXPECT_LT(clock::now() - began, 2s);
  EXPECT_EQ(got.error().code, errc::store_key_not_found);
  EXPECT_NE(got.error().message().find("'missing/key'"), std::string::npos) << got.error().message();
  EXPECT_NE(got.error().message().find(s.address().to_string()), std::string::npos);
}

TEST(KvStore, LargeValueRoundTripsThroughThePool) {
  served_store s;
  auto c = dial(s.address());
  ASSERT_TRUE(c);
  std::vector<std::byte> big(200000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 7);
  ASSERT_TRUE(c->set("blob", big));
  auto got = c->get("blob");
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(got.value(), big);
}

TEST(KvStore, ConcurrentAddFromEightClientsGivesTheExactTotal) {
  served_store s;
  constexpr int clients = 8;
  constexpr int adds = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  std::vector<std::int64_t> last(clients, 0);
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      auto c = kv_store_client::connect(s.address(), 5s);
      if (!c) return void(++failures);
      for (int i = 0; i < adds; ++i) {
        auto v = c.value()->add("counter", 3);
        if (!v) return void(++failures);
        // Each reply is the counter after this add: strictly increasing per client.
        if (v.value() <= last[static_cast<std::size_t>(t)]) ++failures;
        last[static_cast<std::size_t>(t)] = v.value();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto c = dial(s.address());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->add("counter", 0).value(), std::int64_t{clients} * adds * 3);
  EXPECT_EQ(c->add("counter", -5).value(), std::int64_t{clients} * adds * 3 - 5);
}

TEST(KvStore, AddOnAValueThatIsNoIntegerFailsTyped) {
  served_store s;
  auto c = dial(s.address());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->set("name", "abc"));
  auto r = c->add("name", 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::store_not_integer);
  EXPECT_NE(r.error().message().find("'name'"), std::string::npos);
}

TEST(KvStore, WaitIsWokenByALaterSetFromAnotherClient) {
  served_store s;
  auto waiter = dial(s.address());
  auto setter = dial(s.address());
  ASSERT_TRUE(waiter && setter);
  ASSERT_TRUE(setter->set("a", "1"));
  std::promise<detailed_result<void>> waited;
  auto result = waited.get_future();
  std::thread t{[&] {
    const std::vector<std::string> keys{"a", "b", "c"};
    waited.set_value(waiter->wait(keys, 10s));
  }};
  // Parked until both missing keys exist: one set is not enough.
  ASSERT_TRUE(setter->set("b", "2"));
  EXPECT_EQ(result.wait_for(100ms), std::future_status::timeout);
  const auto set_at = clock::now();
  ASSERT_TRUE(setter->set("c", "3"));
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  EXPECT_LT(clock::now() - set_at, 2s);
  EXPECT_TRUE(result.get());
  t.join();
}

TEST(KvStore, WaitingGetReturnsTheValueOfALaterSet) {
  served_store s;
  auto getter = dial(s.address());
  auto setter = dial(s.address());
  ASSERT_TRUE(getter && setter);
  auto got = std::async(std::launch::async, [&] { return getter->get("late", 10s); });
  EXPECT_EQ(got.wait_for(50ms), std::future_status::timeout);
  ASSERT_TRUE(setter->set("late", "here"));
  auto r = got.get();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(text(r.value()), "here");
}

TEST(KvStore, WaitTimesOutWithAnErrorNamingTheKeys) {
  served_store s;
  auto c = dial(s.address());
  ASSERT_TRUE(c);
  const std::vector<std::string> keys{"never/1", "never/2"};
  const auto began = clock::now();
  auto r = c->wait(keys, 150ms);
  const auto took = clock::now() - began;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::store_timeout);
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 3s);
  EXPECT_NE(r.error().message().find("'never/1'"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("'never/2'"), std::string::npos);
  EXPECT_EQ(s.stats().waits_timed_out, 1u);
  // The connection still serves after a timed-out wait.
  EXPECT_TRUE(c->set("never/1", "now"));
}

TEST(KvStore, ClientStartedBeforeTheServerRetriesUntilItIsUp) {
  const auto port = free_port();
  auto c = std::async(std::launch::async, [port] {
    return kv_store_client::connect({"127.0.0.1", port}, 10s);
  });
  std::this_thread::sleep_for(300ms);  // several refused dials happen meanwhile
  served_store s{{}, port};
  auto client = c.get();
  ASSERT_TRUE(client) << client.error().message();
  ASSERT_TRUE(client.value()->set("k", "v"));
  EXPECT_EQ(s.stats().clients_accepted, 1u);
}

// A listener that accepts and at once closes `count` connections (a store restarting), then
// stops listening; its port, on 127.0.0.1.
struct slamming_listener {
  explicit slamming_listener(int count) {
    const io::test::plain_listener listening = io::test::plain_listen();
    EXPECT_GE(listening.fd, 0) << "socket, bind, listen or getsockname on 127.0.0.1 failed";
    fd = listening.fd;
    port = listening.port();
    slammer = std::thread{[this, count] {
      for (int i = 0; i < count; ++i) {
        const int c = ::accept(fd, nullptr, nullptr);
        if (c < 0) return;
        ::close(c);
        ++slammed;
      }
    }};
  }
  ~slamming_listener() { done(); }
  void done() {
    if (slammer.joinable()) slammer.join();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  int fd = -1;
  std::uint16_t port = 0;
  std::atomic<int> slammed{0};
  std::thread slammer;
};

// Each slammed connection is given up on, and the client dials again, on its own reactor and on
// a given one. A connection given up on while still closing (its finish queued on the reactor) is
// kept until it has ended: TSan caught the old client freeing it under that finish once, in CI,
// when `ss -K` cut a rank's store connection (CollectivesOverRanks.LinkKilledFromOutsideWithSs);
// this test takes the same redial path but does not force that window.
TEST(KvStore, ConnectionsClosedRightAfterTheAcceptAreDialledAgainUntilAStoreServes) {
  for (const bool given_reactor : {false, true}) {
    SCOPED_TRACE(given_reactor ? "given reactor" : "own reactor");
    slamming_listener slam{5};
    io::reactor r{io::reactor_config{}};
    ASSERT_TRUE(r.start());
    const endpoint at{"127.0.0.1", slam.port};
    auto c = std::async(std::launch::async, [&] {
      return given_reactor ? kv_store_client::connect(r, at, 10s)
                           : kv_store_client::connect(at, 10s);
    });
    slam.done();  // all five slammed: nobody listens now, so the client's dials are refused
    EXPECT_EQ(slam.slammed.load(), 5);
    {
      served_store s{{}, slam.port};
      auto client = c.get();
      ASSERT_TRUE(client) << client.error().message();
      ASSERT_TRUE(client.value()->set("k", "v"));
      EXPECT_EQ(text(client.value()->get("k", 1s).value()), "v");
    }
    r.stop();
  }
}

TEST(KvStore, NoServerFailsWithinTheDeadlineNamingTheAddress) {
  const auto port = free_port();
  const auto began = clock::now();
  auto c = kv_store_client::connect({"127.0.0.1", port}, 400ms);
  const auto took = clock::now() - began;
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, errc::store_unreachable);
  const auto expected = "no store at 127.0.0.1:" + std::to_string(port) + " after ";
  EXPECT_EQ(c.error().message().rfind(expected, 0), 0u) << c.error().message();
  EXPECT_NE(c.error().message().find("connection refused"), std::string::npos)
      << c.error().message();
  EXPECT_GE(took, 350ms);
  EXPECT_LT(took, 3s);
}

TEST(KvStore, GarbageClientIsDroppedWhileOthersKeepWorking) {
  served_store s;
  auto good = dial(s.address());
  ASSERT_TRUE(good);
  ASSERT_TRUE(good->set("before", "1"));

  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const auto addr = io::socket_address::loopback_v4(s.server.port());
  ASSERT_EQ(::connect(fd, addr.data(), addr.length), 0);
  const char garbage[] = "GET / HTTP/1.1\r\nHost: store\r\n\r\n this is not a vessel frame";
  ASSERT_GT(::send(fd, garbage, sizeof garbage, MSG_NOSIGNAL), 0);
  // The server closes it: recv sees EOF (or a reset), never a reply.
  char buf[64];
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  EXPECT_LE(::recv(fd, buf, sizeof buf, 0), 0);
  ::close(fd);

  EXPECT_EQ(s.stats().clients_dropped, 1u);
  ASSERT_TRUE(good->set("after", "2"));
  EXPECT_EQ(text(good->get("before").value()), "1");
  EXPECT_EQ(s.clients(), 1u);
}

TEST(KvStore, WellFormedFrameThatIsNoStoreRequestIsDropped) {
  served_store s;
  auto good = dial(s.address());
  ASSERT_TRUE(good);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const auto addr = io::socket_address::loopback_v4(s.server.port());
  ASSERT_EQ(::connect(fd, addr.data(), addr.length), 0);
  // A valid data frame with an ordinary tag: a peer that dialled the wrong port.
  wire::frame_header h;
  h.body = wire::data_fields{};
  wire::frame_encoder enc;
  auto enc_iov = enc.encode(h, {});
  ASSERT_TRUE(enc_iov);
  for (const auto& v : enc_iov.value()) {
    if (v.iov_len > 0) {
      ASSERT_GT(::send(fd, v.iov_base, v.iov_len, MSG_NOSIGNAL), 0);
    }
  }
  char buf[64];
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  EXPECT_LE(::recv(fd, buf, sizeof buf, 0), 0);
  ::close(fd);
  EXPECT_EQ(s.stats().clients_dropped, 1u);
  EXPECT_TRUE(good->set("still", "fine"));
}

TEST(KvStore, LimitsAreEnforcedWithTypedErrors) {
  kv_store_limits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 64;
  limits.max_entries = 2;
  limits.max_clients = 2;
  limits.max_waiters = 1;
  served_store s{limits};
  kv_store_client_options o;  // the client's own bounds are looser: the server must refuse
  auto a = dial(s.address(), o);
  auto b = dial(s.address(), o);
  ASSERT_TRUE(a && b);

  auto long_key = a->set(std::string(17, 'k'), "v");
  ASSERT_FALSE(long_key);
  EXPECT_EQ(long_key.error().code, errc::store_limit_exceeded);
  auto big = a->set("k", std::string(65, 'v'));
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, errc::store_limit_exceeded);
  ASSERT_TRUE(a->set("k1", std::string(64, 'v')));
  ASSERT_TRUE(a->set("k2", "v"));
  auto full = a->set("k3", "v");
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, errc::store_limit_exceeded);
  EXPECT_NE(full.error().message().find("'k3'"), std::string::npos);
  EXPECT_TRUE(a->set("k2", "replacing is fine"));

  // One waiter at most: a second parked request is refused, not queued.
  auto parked = std::async(std::launch::async, [&] { return a->get("absent1", 600ms); });
  std::this_thread::sleep_for(100ms);
  auto second = b->get("absent2", 2s);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, errc::store_limit_exceeded);
  EXPECT_EQ(parked.get().error().code, errc::store_timeout);

  // A third client is refused with a typed error, and the first two still work.
  auto c = kv_store_client::connect(s.address(), 2s);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, errc::store_too_many_clients);
  EXPECT_TRUE(b->get("k1"));
}

TEST(KvStore, ClientTooLargeKeyIsRefusedBeforeSending) {
  served_store s;
  kv_store_client_options o;
  o.max_key_bytes = 8;
  auto c = dial(s.address(), o);
  ASSERT_TRUE(c);
  auto r = c->set("way-too-long-key", "v");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::store_limit_exceeded);
  EXPECT_EQ(s.stats().requests, 1u);  // the ping only
}

TEST(KvStore, StoppedServerFailsPendingAndLaterCallsWithConnectionLost) {
  served_store s;
  auto c = dial(s.address());
  ASSERT_TRUE(c);
  auto waiting = std::async(std::launch::async, [&] { return c->get("never", 10s); });
  std::this_thread::sleep_for(100ms);
  s.server.stop();
  auto r = waiting.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::store_connection_lost);
  auto later = c->set("x", "y");
  ASSERT_FALSE(later);
  EXPECT_EQ(later.error().code, errc::store_connection_lost);
  EXPECT_NE(later.error().message().find(s.address().to_string()), std::string::npos);
}

TEST(KvStore, ClientOnAGivenReactorWorks) {
  served_store s;
  io::reactor r{io::reactor_config{}};
  ASSERT_TRUE(r.start());
  {
    auto c = kv_store_client::connect(r, s.address(), 5s);
    ASSERT_TRUE(c) << c.error().message();
    EXPECT_EQ(c.value()->add("n", 2).value(), 2);
  }
  r.stop();
}

}  // namespace
}  // namespace vessel::actors
