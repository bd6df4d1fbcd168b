#pragma once
// Accepts TCP connections through a reactor: bind/listen with plain syscalls (any thread, before
// start), then one ACCEPT op, multishot where the kernel has it (the reactor re-arms a plain
// accept whenever a completion lacks IORING_CQE_F_MORE). Each accepted socket gets the listener's
// socket options and goes to a callback, which owns it from then on.

#include <cstdint>
#include <functional>
#include <optional>

#include "io/io_op.hpp"
#include "io/tcp_socket.hpp"
#include "io/timer_queue.hpp"
#include "wire/result.hpp"

namespace vessel::io {

class reactor;

/// A listening TCP socket on one reactor.
class tcp_listener {
 public:
  /// A new connection's socket, or, as the final call, why accepting ended
  /// (errc::transport_closed after close(), or the error that stopped it).
  using accept_callback = std::function<void(result<int> fd)>;

  explicit tcp_listener(reactor& r) : reactor_{r} {}
  tcp_listener(const tcp_listener&) = delete;
  tcp_listener& operator=(const tcp_listener&) = delete;
  /// Closes the socket. Destroy only while not accepting (after the final callback, or after the
  /// reactor stopped).
  ~tcp_listener();

  /// Binds `address` (port 0: an ephemeral port, see port()) with SO_REUSEADDR, so that a
  /// restarted listener gets its port back while old connections linger in TIME_WAIT, and listens.
  /// An IPv6 address listens on IPv6 only. Any thread, before start().
  result<void> listen(const socket_address& address, int backlog = 128);

  /// The bound address (its port is the ephemeral one when listen() asked for port 0).
  const socket_address& local_address() const noexcept { return local_; }
  std::uint16_t port() const noexcept { return local_.port(); }

  /// Starts accepting; reactor thread.
  result<void> start(const tcp_socket_options& options, accept_callback cb);

  /// Stops accepting; the callback's final call (errc::transport_closed) follows once the accept
  /// op has completed, and the socket is closed by then. Reactor thread.
  void close();

  /// True from start() until the final callback.
  bool accepting() const noexcept { return static_cast<bool>(callback_); }
  /// Connections accepted so far.
  std::uint64_t accepted() const noexcept { return accepted_; }

 private:
  struct accept_op final : io_op {
    explicit accept_op(tcp_listener& l) : owner(l) {}
    void complete(int res, std::uint32_t flags) override { owner.on_accept(res, flags); }
    tcp_listener& owner;
  };

  void on_accept(int res, std::uint32_t flags);
  void finish(std::error_code why);

  reactor& reactor_;
  accept_op op_{*this};
  int fd_ = -1;
  socket_address local_;
  tcp_socket_options options_;
  accept_callback callback_;
  std::optional<timer_id> retry_timer_;
  bool closing_ = false;
  std::uint64_t accepted_ = 0;
};

}  // namespace vessel::io
