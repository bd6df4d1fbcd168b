#pragma once
// The rendezvous key-value store that rank 0 serves (VESSEL_STORE=host:port), in the manner of
// torch.distributed's TCPStore: set, get (at once or waiting), wait for several keys, atomic add,
// erase. Everything runs on one reactor thread, so the map needs no lock; waiters are parked until
// a set completes them or their reactor timer fires. Every resource is bounded (key and value
// bytes, entries, total bytes, clients, waiters) and a client that sends something that is not a
// store request is dropped with a log line, without disturbing the others.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/kv_store_protocol.hpp"
#include "io/tcp_listener.hpp"
#include "io/tcp_transport.hpp"
#include "io/timer_queue.hpp"
#include "wire/result.hpp"

namespace vessel::io {
class reactor;
}

namespace vessel::actors {

/// The store's bounds. Every key with its default.
struct kv_store_limits {
  std::size_t max_key_bytes = 1024;
  std::size_t max_value_bytes = 1u << 20;
  std::size_t max_entries = 1u << 16;
  std::size_t max_total_bytes = 64u << 20;  ///< keys plus values
  std::size_t max_clients = 1024;           ///< connections served at once; more are refused
  std::size_t max_waiters = 4096;           ///< parked get/wait requests, all clients together
  std::size_t max_wait_keys = 1024;         ///< keys in one wait request
};

/// Counters of a server; read on its reactor thread (or after it stopped).
struct kv_store_server_stats {
  std::uint64_t requests = 0;
  std::uint64_t clients_accepted = 0;
  std::uint64_t clients_refused = 0;  ///< beyond max_clients
  std::uint64_t clients_dropped = 0;  ///< sent something that is not a store request
  std::uint64_t waits_timed_out = 0;
};

/// A key-value store served on one reactor. Construct anywhere; listen() on any thread; start()
/// and stop() from any thread (they hop to the reactor and wait there). Destroy after stop()
/// or after the reactor stopped.
class kv_store_server {
 public:
  explicit kv_store_server(io::reactor& r, kv_store_limits limits = {});
  kv_store_server(const kv_store_server&) = delete;
  kv_store_server& operator=(const kv_store_server&) = delete;
  ~kv_store_server();

  /// Binds and listens (port 0: ephemeral, see port()). Any thread, before start().
  result<void> listen(const io::socket_address& address);
  /// The port listened on.
  std::uint16_t port() const noexcept { return listener_.port(); }

  /// Starts accepting. Any thread except, when it must wait, none other than the reactor's.
  result<void> start();
  /// Stops accepting and closes every client; parked waiters are dropped. Any thread; returns once
  /// the reactor has run it. Idempotent.
  void stop();

  /// Clients connected now (reactor thread).
  std::size_t clients() const noexcept { return clients_.size(); }
  /// Keys stored now (reactor thread).
  std::size_t size() const noexcept { return map_.size(); }
  const kv_store_server_stats& stats() const noexcept { return stats_; }

 private:
  struct client;
  struct waiter {
    std::uint64_t client_id;
    std::uint64_t request_id;
    store_op op;
    std::vector<std::string> keys;
    io::timer_id timer = 0;
  };

  void run_on_reactor(std::function<void()> fn);
  void on_accept(result<int> fd);
  void on_request(client& c, const wire::frame_header& h, std::span<const std::byte> payload);
  void handle(client& c, const store_request& req);
  void park(client& c, const store_request& req);
  void wake_waiters();
  bool satisfied(const waiter& w) const;
  void finish_waiter(std::uint64_t waiter_id, store_status status);
  void reply(client& c, store_op op, std::uint64_t id, store_status status, std::int64_t arg = 0,
             std::span<const std::byte> value = {});
  void drop(client& c, const char* why);
  void remove(std::uint64_t client_id);
  store_status store(std::string_view key, std::span<const std::byte> value);

  io::reactor& reactor_;
  kv_store_limits limits_;
  io::tcp_listener listener_;
  io::buffer_pool pool_;  // replies too large for the transport's copy slots
  io::tcp_transport_options transport_options_;
  bool stopped_ = false;

  std::map<std::string, std::vector<std::byte>, std::less<>> map_;
  std::size_t total_bytes_ = 0;
  std::unordered_map<std::uint64_t, std::unique_ptr<client>> clients_;
  std::uint64_t next_client_ = 1;
  std::map<std::uint64_t, waiter> waiters_;  // by arrival: older waiters are served first
  std::uint64_t next_waiter_ = 1;
  store_request request_;            // reused: its key vector keeps its capacity
  std::vector<std::byte> scratch_;  // response payloads, reused
  kv_store_server_stats stats_;
};

}  // namespace vessel::actors
