#pragma once
// Dials TCP on a reactor: non-blocking socket, options applied, IORING_OP_CONNECT, a reactor timer
// that cancels the connect at its deadline, and (connect_with_retry) re-dialling with exponential
// backoff and full jitter (io/backoff.hpp). Addresses arrive resolved: resolve() (tcp_socket.hpp)
// blocks on DNS and belongs to a setup thread.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "io/backoff.hpp"
#include "io/io_op.hpp"
#include "io/tcp_socket.hpp"
#include "io/timer_queue.hpp"
#include "wire/result.hpp"

namespace vessel::io {

class reactor;

/// One dial. Every key with its default.
struct connect_options {
  tcp_socket_options socket;  ///< applied before connect (buffer sizes must precede the SYN)
  /// Deadline of one attempt: past it the attempt ends with errc::connect_timeout.
  std::chrono::nanoseconds timeout = std::chrono::seconds{5};
};

/// Connects sockets on one reactor; one dial (with its retries) at a time. Reactor thread only.
/// Destroy it only while idle (!busy()), e.g. from its callback or after cancel()'s callback.
class tcp_connector {
 public:
  /// The connected socket (owned by the callee from then on), or why the dial failed:
  /// errc::connection_refused, errc::connect_timeout, another typed or errno error, or
  /// std::errc::operation_canceled after cancel().
  using callback = std::function<void(result<int> fd)>;

  explicit tcp_connector(reactor& r) : reactor_{r} {}
  tcp_connector(const tcp_connector&) = delete;
  tcp_connector& operator=(const tcp_connector&) = delete;
  ~tcp_connector();

  /// One attempt at `address`. Fails at once (callback not called) when busy.
  result<void> connect(const socket_address& address, const connect_options& options, callback cb);

  /// Attempts until one succeeds, cycling through `addresses`; after each failure waits the next
  /// backoff delay of `policy` (seeded with `seed`) and gives up with the last attempt's error
  /// once the policy runs out of attempts.
  result<void> connect_with_retry(std::vector<socket_address> addresses,
                                  const connect_options& options, reconnect_policy policy,
                                  std::uint64_t seed, callback cb);

  /// Abandons the dial: the callback gets std::errc::operation_canceled (at once when waiting
  /// out a backoff delay, else when the cancelled connect completes).
  void cancel();

  /// True from connect() until the callback has been called.
  bool busy() const noexcept { return static_cast<bool>(callback_); }
  /// Attempts started in the current (or last) dial.
  std::uint32_t attempts() const noexcept { return attempts_; }

 private:
  struct connect_op final : io_op {
    explicit connect_op(tcp_connector& c) : owner(c) {}
    void complete(int res, std::uint32_t) override { owner.on_connect(res); }
    tcp_connector& owner;
  };

  void attempt();
  void on_connect(int res);
  void on_failure(std::error_code ec);
  void deliver(result<int> r);

  reactor& reactor_;
  connect_op op_{*this};
  std::vector<socket_address> addresses_;
  socket_address current_;  // the SQE points here until the completion
  connect_options options_;
  std::optional<backoff> backoff_;  // engaged by connect_with_retry
  callback callback_;
  int fd_ = -1;
  std::optional<timer_id> timer_;  // deadline of the attempt, or the backoff wait
  bool timed_out_ = false;
  bool cancelled_ = false;
  std::uint32_t attempts_ = 0;
};

}  // namespace vessel::io
