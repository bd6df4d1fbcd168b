#pragma once
// In-process clusters for the mesh tests: N meshes, each on its own reactor thread, meeting
// through a key-value store served on another reactor; a traffic driver that sends scripted
// messages with self-checking payloads and a checker that verifies them on receipt.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <optional>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "actors/auth.hpp"
#include "actors/errc.hpp"
#include "actors/kv_store_client.hpp"
#include "actors/kv_store_server.hpp"
#include "actors/mesh.hpp"
#include "io/reactor.hpp"
#include "io/tcp_socket.hpp"

namespace vessel::actors::test {

using namespace std::chrono_literals;

/// Runs `fn` on `r`'s thread and returns its result.
template <class F>
auto on_reactor(io::reactor& r, F fn) {
  std::packaged_task<decltype(fn())()> task{fn};
  auto f = task.get_future();
  r.post([&task] { task(); });
  return f.get();
}

inline cluster_token make_token(char fill = 'k') {
  std::vector<std::byte> bytes(32, std::byte{static_cast<unsigned char>(fill)});
  return std::move(cluster_token::from_bytes(bytes, "test").value());
}

/// Deterministic payload bytes of message `index` of (src, dst, tag), after a 16-byte header
/// {index, size}: the receiver regenerates and compares them.
inline std::uint64_t pattern_word(std::uint32_t src, std::uint32_t dst, std::uint64_t tag,
                                  std::uint64_t index, std::uint64_t word) {
  std::uint64_t z = (std::uint64_t{src} << 48) ^ (std::uint64_t{dst} << 32) ^ (tag << 24) ^
                    (index * 0x9E3779B97F4A7C15ull) ^ (word * 0xBF58476D1CE4E5B9ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline void fill_payload(std::span<std::byte> p, std::uint32_t src, std::uint32_t dst,
                         std::uint64_t tag, std::uint64_t index) {
  const std::uint64_t size = p.size();
  std::memcpy(p.data(), &index, 8);
  std::memcpy(p.data() + 8, &size, 8);
  for (std::size_t off = 16, w = 0; off < p.size(); off += 8, ++w) {
    const std::uint64_t v = pattern_word(src, dst, tag, index, w);
    std::memcpy(p.data() + off, &v, std::min<std::size_t>(8, p.size() - off));
  }
}

/// Empty string when `p` is what fill_payload wrote for (src, dst, tag) and returns its index.
inline std::string check_payload(std::span<const std::byte> p, std::uint32_t src,
                                 std::uint32_t dst, std::uint64_t tag, std::uint64_t& index) {
  if (p.size() < 16) return "payload shorter than its header";
  std::uint64_t size = 0;
  std::memcpy(&index, p.data(), 8);
  std::memcpy(&size, p.data() + 8, 8);
  if (size != p.size()) return "size " + std::to_string(p.size()) + " != " + std::to_string(size);
  for (std::size_t off = 16, w = 0; off < p.size(); off += 8, ++w) {
    const std::uint64_t v = pattern_word(src, dst, tag, index, w);
    if (std::memcmp(p.data() + off, &v, std::min<std::size_t>(8, p.size() - off)) != 0) {
      return "corrupt byte near offset " + std::to_string(off);
    }
  }
  return {};
}

/// One scripted message.
struct planned {
  std::uint32_t dst;
  std::uint64_t tag;
  std::size_t size;    ///< >= 16
  bool split = false;  ///< sent as a head and a tail (mesh::send's split form)
  std::size_t head = 0;  ///< split: the head's bytes (< size; 0: one fragment)
};

/// A mesh on its own reactor, with an observer that checks and releases what arrives and a
/// driver that sends a script, waiting out pushback.
class node final : public mesh_observer {
 public:
  /// `lendable`: a reactor whose loop callers may borrow, as a rank's is; its TCP transports then
  /// read by readiness and receive large payloads straight into the link's destination.
  explicit node(mesh_config config, bool lendable = false) : reactor_{make_reactor(lendable)} {
    mesh_ = std::make_unique<mesh>(*reactor_, std::move(config), *this);
  }
  ~node() override {
    mesh_->close();  // the observer may still be called until close() returns
    mesh_.reset();
    reactor_->stop();
  }

  mesh& m() { return *mesh_; }
  io::reactor& r() { return *reactor_; }

  /// Queues `script` and starts sending (on the reactor).
  void send_all(std::vector<planned> script) {
    r().post([this, s = std::move(script)]() mutable {
      for (auto& p : s) outbox_[p.dst].push_back(p);
      for (auto& [dst, q] : outbox_) pump(dst);
    });
  }

  /// From now on, every message from a peer lands in memory of this node's own (a 16-byte head
  /// apart, as vessel::comm's receives do) instead of a pool block.
  void land() {
    on_reactor(r(), [this] { return land_ = true; });
  }

  /// Moves the message now arriving from `src` into a pool block to this node's own memory, as
  /// land() would have put it (mesh::divert); what it was is returned, nullopt if none.
  std::optional<message_start> divert(std::uint32_t src) {
    return on_reactor(r(), [&]() -> std::optional<message_start> {
      const std::optional<message_start> m = mesh_->in_progress(src);
      if (!m || !mesh_->divert(src, m->message_id, landing_for(*m))) return std::nullopt;
      return m;
    });
  }

  // mesh_observer (reactor thread)
  message_destination on_message_begin(const message_start& m) override {
    if (!land_) return {};
    return landing_for(m);
  }
  void on_message_abandoned(std::uint32_t src, std::uint64_t, bool final) override {
    std::lock_guard lock{mutex_};
    abandoned_.push_back({src, final});
  }

  void on_message(inbound_message&& msg) override {
    std::uint64_t index = 0;
    std::vector<std::byte> landed;
    if (msg.landed) {
      const auto& [head, body] = landing_[msg.src];
      landed.assign(head.begin(), head.begin() + std::min<std::size_t>(head.size(), msg.length));
      landed.insert(landed.end(), body.begin(), body.end());
      if (landed.size() != msg.length || !msg.payload.empty()) {
        std::lock_guard lock{mutex_};
        errors_.push_back("landed message of " + std::to_string(msg.length) + " bytes, " +
                          std::to_string(landed.size()) + " in the destination");
      }
    }
    const std::span<const std::byte> bytes = msg.landed ? std::span<const std::byte>{landed}
                                                        : msg.payload.bytes();
    std::string bad = check_payload(bytes, msg.src, mesh_->config().self_rank, msg.tag, index);
    std::lock_guard lock{mutex_};
    auto& expected = next_index_[{msg.src, msg.tag}];
    if (bad.empty() && index != expected) {
      bad = "index " + std::to_string(index) + ", expected " + std::to_string(expected);
    }
    if (!bad.empty()) {
      errors_.push_back("from " + std::to_string(msg.src) + " tag " + std::to_string(msg.tag) +
                        ": " + bad);
    }
    expected = index + 1;
    ++received_;
    if (msg.landed) ++landed_;
    bytes_received_ += msg.length;
    if (msg.landed) {
      mesh_->release(msg.src, message_credit(msg.length));  // its bytes are ours already
    } else if (hold_) {
      held_.push_back(std::move(msg));
    } else {
      mesh_->release(msg.src, message_credit(msg.payload.size()));
    }
    cv_.notify_all();
  }

  /// From now on, keep what arrives (no release): a receiver that does not keep up.
  void hold() {
    on_reactor(r(), [this] { return hold_ = true; });
  }
  /// Releases everything held and stops holding.
  void release_held() {
    on_reactor(r(), [this] {
      hold_ = false;
      for (auto& msg : held_) mesh_->release(msg.src, message_credit(msg.payload.size()));
      held_.clear();
      return 0;
    });
  }
  void on_peer_state(std::uint32_t peer, peer_state s, std::error_code why) override {
    std::lock_guard lock{mutex_};
    states_.push_back({peer, s, why});
    cv_.notify_all();
  }
  void on_writable(std::uint32_t peer) override { pump(peer); }

  /// Waits until `count` messages arrived (or `timeout`).
  bool wait_received(std::uint64_t count, std::chrono::milliseconds timeout = 60s) {
    std::unique_lock lock{mutex_};
    return cv_.wait_for(lock, timeout, [&] { return received_ >= count; });
  }
  /// Waits until `peer` was reported in state `s`; returns the reason.
  std::optional<std::error_code> wait_state(std::uint32_t peer, peer_state s,
                                            std::chrono::milliseconds timeout = 30s) {
    std::unique_lock lock{mutex_};
    std::optional<std::error_code> why;
    cv_.wait_for(lock, timeout, [&] {
      for (auto& e : states_) {
        if (e.peer == peer && e.state == s) {
          why = e.why;
          return true;
        }
      }
      return false;
    });
    return why;
  }
  std::uint64_t received() {
    std::lock_guard lock{mutex_};
    return received_;
  }
  std::vector<std::string> errors() {
    std::lock_guard lock{mutex_};
    return errors_;
  }
  std::uint64_t send_errors() { return send_errors_.load(); }
  std::uint64_t landed() {
    std::lock_guard lock{mutex_};
    return landed_;
  }
  /// (source, final) of every on_message_abandoned so far.
  std::vector<std::pair<std::uint32_t, bool>> abandoned() {
    std::lock_guard lock{mutex_};
    return abandoned_;
  }
  peer_link_stats stats(std::uint32_t peer) {
    return on_reactor(r(), [&] { return mesh_->stats(peer); });
  }
  mesh_stats totals() {
    return on_reactor(r(), [&] { return mesh_->totals(); });
  }

 private:
  struct state_event {
    std::uint32_t peer;
    peer_state state;
    std::error_code why;
  };

  message_destination landing_for(const message_start& m) {
    auto& [head, body] = landing_[m.src];
    body.assign(m.length > head.size() ? m.length - head.size() : 0, std::byte{0});
    return {head, body, {}};
  }

  static std::unique_ptr<io::reactor> make_reactor(bool lendable) {
    io::reactor_config config;
    config.lendable = lendable;
    auto r = std::make_unique<io::reactor>(config);
    EXPECT_TRUE(r->start());
    return r;
  }

  // Reactor thread: sends the next messages to `dst` until the mesh or the pool pushes back.
  void pump(std::uint32_t dst) {
    auto& q = outbox_[dst];
    while (!q.empty()) {
      const planned& p = q.front();
      io::buffer block = mesh_->pool().try_acquire(p.size);
      // A split message's tail lies in memory of its own (a second block), as a lender's would.
      const std::size_t head =
          !p.split ? p.size : p.head != 0 ? p.head : mesh_->fragment_bytes();
      io::buffer tail = p.split ? mesh_->pool().try_acquire(p.size - head) : io::buffer{};
      if (!block || (p.split && !tail)) {  // the pool is busy with messages in flight: retry
        if (!retry_armed_[dst]) {
          retry_armed_[dst] = true;
          r().add_timer(1ms, [this, dst] {
            retry_armed_[dst] = false;
            pump(dst);
          });
        }
        return;
      }
      const std::uint32_t self = mesh_->config().self_rank;
      const std::uint64_t index = sent_index_[{dst, p.tag}];
      fill_payload(block.bytes().first(p.size), self, dst, p.tag, index);
      if (p.split) std::memcpy(tail.data(), block.data() + head, p.size - head);
      auto sent = p.split ? mesh_->send(dst, p.tag, std::move(block).slice(0, head),
                                        std::move(tail).slice(0, p.size - head))
                          : mesh_->send(dst, p.tag, std::move(block).slice(0, p.size));
      if (!sent) {
        if (sent.error() == errc::link_would_block) return;  // on_writable resumes
        ++send_errors_;
        q.pop_front();
        continue;
      }
      ++sent_index_[{dst, p.tag}];
      q.pop_front();
    }
  }

  std::unique_ptr<io::reactor> reactor_;
  std::unique_ptr<mesh> mesh_;

  // Reactor thread only.
  std::map<std::uint32_t, std::deque<planned>> outbox_;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint64_t> sent_index_;
  std::map<std::uint32_t, bool> retry_armed_;
  std::atomic<std::uint64_t> send_errors_{0};
  bool hold_ = false;
  std::vector<inbound_message> held_;
  bool land_ = false;
  std::map<std::uint32_t, std::pair<std::array<std::byte, 16>, std::vector<std::byte>>> landing_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint64_t> next_index_;
  std::vector<std::string> errors_;
  std::vector<state_event> states_;
  std::uint64_t received_ = 0;
  std::uint64_t landed_ = 0;
  std::vector<std::pair<std::uint32_t, bool>> abandoned_;
  std::uint64_t bytes_received_ = 0;
};

/// A store on its own reactor.
struct store_fixture {
  store_fixture() : server{r} {
    EXPECT_TRUE(r.start());
    EXPECT_TRUE(server.listen(io::socket_address::loopback_v4(0)));
    EXPECT_TRUE(server.start());
  }
  ~store_fixture() {
    server.stop();
    r.stop();
  }
  endpoint address() const { return {"127.0.0.1", server.port()}; }
  io::reactor r;
  kv_store_server server;
};

/// Connects every mesh through `store`, each on a thread of its own at once (a mesh's connect
/// waits for its peers); true when all came up.
inline bool connect_meshes(const store_fixture& store, const std::vector<mesh*>& meshes,
                           std::chrono::milliseconds deadline = 20s) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (mesh* m : meshes) {
    threads.emplace_back([&, m] {
      auto client = kv_store_client::connect(store.address(), 10s);
      if (!client) {
        ADD_FAILURE() << client.error().message();
        ++failures;
        return;
      }
      auto up = m->connect(*client.value(), deadline);
      if (!up) {
        ADD_FAILURE() << up.error().message();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  return failures == 0;
}

/// Small pools (not pre-faulted): tests run many meshes in one process.
inline io::buffer_pool_config test_pool() {
  io::buffer_pool_config c;
  c.classes = {{4096, 512}, {64u << 10, 64}, {1u << 20, 16}, {8u << 20, 12}};
  c.populate = false;
  return c;
}

inline mesh_config base_config(std::uint32_t rank, std::uint32_t world,
                               const cluster_token& token, mesh_transport t,
                               const std::string& prefix) {
  mesh_config c;
  c.self_rank = rank;
  c.world_size = world;
  c.incarnation = 1000 + rank;
  c.token = &token;
  c.transport = t;
  c.store_prefix = prefix;
  c.pool = test_pool();
  c.shm.ring_bytes = 1u << 20;
  c.shm.area_bytes = 4u << 20;
  c.handshake_timeout = 2000ms;
  c.reconnect_deadline = 20000ms;
  c.liveness.heartbeat_interval = 200ms;
  c.liveness.peer_deadline = 10s;
  return c;
}

/// N nodes connected through a store; connect() runs on N threads at once.
struct cluster {
  cluster(std::uint32_t world, mesh_transport t, const std::string& prefix,
          std::function<void(mesh_config&)> tweak = {}, bool lendable = false)
      : token{make_token()} {
    for (std::uint32_t i = 0; i < world; ++i) {
      mesh_config c = base_config(i, world, token, t, prefix);
      if (tweak) tweak(c);
      nodes.push_back(std::make_unique<node>(std::move(c), lendable));
    }
  }

  /// Connects every node; true when all came up.
  bool connect(std::chrono::milliseconds deadline = 20s) {
    std::vector<mesh*> meshes;
    for (auto& n : nodes) meshes.push_back(&n->m());
    return connect_meshes(store, meshes, deadline);
  }

  store_fixture store;
  cluster_token token;
  std::vector<std::unique_ptr<node>> nodes;
};

}  // namespace vessel::actors::test
