#pragma once
// The blocking client of the rendezvous store (actors/kv_store_server.hpp), for bootstrap code and
// applications. Its socket lives on a reactor (its own thread, or one it is given); each call
// posts the request there and waits for the reply or its timeout, so any number of threads may
// call one client at once. Every failure is a detailed_error whose sentence names the store's
// address, and for key operations the key.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/detailed_error.hpp"
#include "actors/endpoint.hpp"
#include "actors/kv_store_protocol.hpp"
#include "io/backoff.hpp"
#include "io/buffer_pool.hpp"

namespace vessel::io {
class reactor;
class tcp_connector;
class tcp_transport;
}  // namespace vessel::io

namespace vessel::actors {

/// How a client connects and how long its operations may take. Every key with its default.
struct kv_store_client_options {
  /// Timeout of set, get (not waiting), add, erase; a waiting get or wait adds this to its own.
  std::chrono::milliseconds op_timeout = std::chrono::seconds{30};
  /// Longest single dial attempt (cut short by connect's deadline).
  std::chrono::milliseconds attempt_timeout = std::chrono::seconds{5};
  /// Delays between dials: from 10 ms, doubling to 1 s, jittered so that a whole job's ranks do
  /// not dial rank 0 in lockstep.
  io::reconnect_policy retry{std::chrono::milliseconds{10}, std::chrono::seconds{1}, 2.0, 0, true};
  /// Bounds this client sends and accepts; keep them equal to the server's.
  std::size_t max_key_bytes = 1024;
  std::size_t max_value_bytes = 1u << 20;
};

/// A connection to a key-value store. Not movable (the reactor holds pointers into it).
class kv_store_client {
 public:
  /// Dials `address` until `deadline` (from now) passes, retrying refused and timed-out dials with
  /// backoff, then pings the store. Fails with errc::store_unreachable, "no store at host:port
  /// after 30 s: connection refused", or errc::store_too_many_clients. Runs its own reactor thread.
  static detailed_result<std::unique_ptr<kv_store_client>> connect(
      const endpoint& address, std::chrono::milliseconds deadline,
      kv_store_client_options options = {});
  /// As above, on `r` (started, running on another thread than the caller's). Destroy the client
  /// before `r` stops.
  static detailed_result<std::unique_ptr<kv_store_client>> connect(
      io::reactor& r, const endpoint& address, std::chrono::milliseconds deadline,
      kv_store_client_options options = {});

  kv_store_client(const kv_store_client&) = delete;
  kv_store_client& operator=(const kv_store_client&) = delete;
  /// Closes the connection (and stops the reactor when it owns one).
  ~kv_store_client();

  /// Stores `value` under `key`, replacing any value; wakes the store's waiters on `key`.
  detailed_result<void> set(std::string_view key, std::span<const std::byte> value);
  /// set() of the characters of `value`.
  detailed_result<void> set(std::string_view key, std::string_view value);
  /// The value of `key`; errc::store_key_not_found at once when absent.
  detailed_result<std::vector<std::byte>> get(std::string_view key);
  /// The value of `key`, waiting up to `wait` for a set; errc::store_timeout naming the key.
  detailed_result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds wait);
  /// Returns once every key exists; errc::store_timeout naming the keys after `timeout`.
  detailed_result<void> wait(std::span<const std::string> keys, std::chrono::milliseconds timeout);
  /// Adds `delta` to the 8-byte little-endian counter under `key` (absent: 0) and returns the new
  /// value; atomic with respect to every other client. errc::store_not_integer otherwise.
  detailed_result<std::int64_t> add(std::string_view key, std::int64_t delta);
  /// Removes `key` (absent is fine).
  detailed_result<void> erase(std::string_view key);

  /// The address this client dialled.
  const endpoint& address() const noexcept { return address_; }

 private:
  struct handler;
  struct pending {
    bool done = false;
    store_status status = store_status::ok;
    std::int64_t arg = 0;
    std::vector<std::byte> value;
    std::error_code lost;  // set when the connection ended first
  };

  kv_store_client(std::unique_ptr<io::reactor> own, io::reactor& r, endpoint address,
                  kv_store_client_options options);
  detailed_result<void> dial(std::chrono::steady_clock::time_point deadline);
  detailed_result<pending> call(store_op op, std::span<const std::string_view> keys,
                                std::int64_t arg, std::span<const std::byte> value,
                                std::chrono::milliseconds timeout);
  detailed_error failure(store_op op, std::span<const std::string_view> keys, const pending& p,
                         bool timed_out, std::chrono::milliseconds timeout) const;

  std::unique_ptr<io::reactor> own_reactor_;
  io::reactor& reactor_;
  endpoint address_;
  kv_store_client_options options_;
  io::buffer_pool pool_;
  std::unique_ptr<handler> handler_;  // reactor thread: connector, transport

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::uint64_t, pending*> pending_;  // requests awaiting their reply
  std::uint64_t next_id_ = 1;
  bool connected_ = false;
  std::error_code lost_;  // why the connection ended, once it has
};

/// Formats a duration for an error line: "30 s", "0.25 s".
std::string format_seconds(std::chrono::nanoseconds d);

}  // namespace vessel::actors
