#include "io/tcp_connector.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>

#include "io/errc.hpp"
#include "io/reactor.hpp"

namespace vessel::io {

tcp_connector::~tcp_connector() {
  assert(!op_.in_flight() && "destroy a tcp_connector only while idle");
  if (timer_) reactor_.cancel_timer(*timer_);
  if (fd_ >= 0) ::close(fd_);
}

result<void> tcp_connector::connect(const socket_address& address, const connect_options& options,
                                    callback cb) {
  if (busy()) return std::make_error_code(std::errc::operation_in_progress);
  addresses_.assign(1, address);
  options_ = options;
  backoff_.reset();
  callback_ = std::move(cb);
  attempts_ = 0;
  cancelled_ = false;
  attempt();
  return outcome::success();
}

result<void> tcp_connector::connect_with_retry(std::vector<socket_address> addresses,
                                               const connect_options& options,
                                               reconnect_policy policy, std::uint64_t seed,
                                               callback cb) {
  if (busy()) return std::make_error_code(std::errc::operation_in_progress);
  if (addresses.empty()) return std::make_error_code(std::errc::invalid_argument);
  addresses_ = std::move(addresses);
  options_ = options;
  backoff_.emplace(policy, seed);
  callback_ = std::move(cb);
  attempts_ = 0;
  cancelled_ = false;
  attempt();
  return outcome::success();
}

void tcp_connector::attempt() {
  timer_.reset();
  current_ = addresses_[attempts_ % addresses_.size()];
  ++attempts_;
  timed_out_ = false;
  fd_ = ::socket(current_.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    on_failure({errno, std::generic_category()});
    return;
  }
  if (auto r = apply_socket_options(fd_, options_.socket); !r) {
    on_failure(r.error());
    return;
  }
  reactor_.connect(op_, fd_, current_.data(), current_.length);
  // A reactor timer rather than IOSQE_IO_LINK + LINK_TIMEOUT: the reactor's connect() arms one
  // SQE and offers no linking; cancelling at the deadline has the same effect.
  timer_ = reactor_.add_timer(options_.timeout, [this] {
    timer_.reset();
    timed_out_ = true;
    reactor_.cancel(op_);
  });
}

void tcp_connector::on_connect(int res) {
  if (timer_) {
    reactor_.cancel_timer(*timer_);
    timer_.reset();
  }
  if (res == 0 && !cancelled_) {
    const int fd = fd_;
    fd_ = -1;
    if (backoff_) backoff_->reset();
    deliver(fd);
    return;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (cancelled_) {
    deliver(std::make_error_code(std::errc::operation_canceled));
    return;
  }
  if (res == 0) return;  // unreachable: success handled above
  if (res == -ECANCELED || res == -ETIMEDOUT) {
    // ECANCELED: our deadline cancelled it (or the reactor is stopping); ETIMEDOUT: the kernel
    // gave up on SYN retransmissions first.
    on_failure(timed_out_ || res == -ETIMEDOUT ? make_error_code(errc::connect_timeout)
                                               : make_error_code(errc::transport_closed));
    return;
  }
  on_failure(error_from_errno(res));
}

void tcp_connector::on_failure(std::error_code ec) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  // A reactor that is stopping refuses new work: retrying would spin.
  const bool retryable = ec != make_error_code(errc::transport_closed);
  if (backoff_ && retryable) {
    if (auto delay = backoff_->next()) {
      timer_ = reactor_.add_timer(*delay, [this] { attempt(); });
      return;
    }
  }
  deliver(ec);
}

void tcp_connector::cancel() {
  if (!busy()) return;
  cancelled_ = true;
  if (op_.in_flight()) {
    reactor_.cancel(op_);  // on_connect delivers
    return;
  }
  if (timer_) {
    reactor_.cancel_timer(*timer_);
    timer_.reset();
  }
  deliver(std::make_error_code(std::errc::operation_canceled));
}

void tcp_connector::deliver(result<int> r) {
  auto cb = std::move(callback_);
  callback_ = nullptr;
  cb(std::move(r));  // last: the callback may destroy this connector or dial again
}

}  // namespace vessel::io
