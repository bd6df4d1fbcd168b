#include "io/tcp_listener.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <chrono>

#include "io/errc.hpp"
#include "io/log.hpp"
#include "io/reactor.hpp"

namespace vessel::io {

tcp_listener::~tcp_listener() {
  assert(!op_.in_flight() && "destroy a tcp_listener only while not accepting");
  if (retry_timer_) reactor_.cancel_timer(*retry_timer_);
  if (fd_ >= 0) ::close(fd_);
}

result<void> tcp_listener::listen(const socket_address& address, int backlog) {
  if (fd_ >= 0) return std::make_error_code(std::errc::already_connected);
  const auto sys_error = [] { return std::error_code{errno, std::generic_category()}; };
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sys_error();
  const int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      (address.family() == AF_INET6 &&
       ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) ||
      ::bind(fd, address.data(), address.length) != 0 || ::listen(fd, backlog) != 0) {
    const auto ec = sys_error();
    ::close(fd);
    return ec;
  }
  auto local = socket_address::local_of(fd);
  if (!local) {
    ::close(fd);
    return local.error();
  }
  fd_ = fd;
  local_ = local.value();
  return outcome::success();
}

result<void> tcp_listener::start(const tcp_socket_options& options, accept_callback cb) {
  if (fd_ < 0) return std::make_error_code(std::errc::not_connected);
  if (accepting()) return std::make_error_code(std::errc::operation_in_progress);
  options_ = options;
  callback_ = std::move(cb);
  closing_ = false;
  reactor_.accept(op_, fd_);
  return outcome::success();
}

void tcp_listener::on_accept(int res, std::uint32_t flags) {
  const bool more = (flags & IORING_CQE_F_MORE) != 0;
  if (res >= 0) {
    if (closing_) {
      ::close(res);  // raced with close(): nobody wants it any more
    } else {
      ++accepted_;
      if (auto r = apply_socket_options(res, options_); !r)
        log::get("io").warn("tcp listener {}: socket options on accepted fd: {}", local_.to_string(),
                            r.error().message());
      callback_(res);
    }
  } else if (!closing_) {
    switch (-res) {
      case ECONNABORTED:
      case EINTR:
      case EAGAIN:
        break;  // the next connection is unaffected
      case EMFILE:
      case ENFILE:
      case ENOBUFS:
      case ENOMEM:
        // Out of descriptors or memory: re-arming at once would spin on the same error.
        log::get("io").warn("tcp listener {}: accept: {}; retrying in 10 ms", local_.to_string(),
                            std::error_code{-res, std::generic_category()}.message());
        if (!more && !retry_timer_) {
          retry_timer_ = reactor_.add_timer(std::chrono::milliseconds{10}, [this] {
            retry_timer_.reset();
            if (!closing_) reactor_.accept(op_, fd_);
            else finish(errc::transport_closed);
          });
        }
        return;
      default:
        if (!more) finish(res == -ECANCELED ? make_error_code(errc::transport_closed)
                                            : error_from_errno(res));
        else closing_ = true;
        return;
    }
  }
  if (more) return;
  if (closing_) finish(errc::transport_closed);
  else reactor_.accept(op_, fd_);  // single-shot path, or the multishot ended: re-arm
}

void tcp_listener::close() {
  if (!accepting() || closing_) return;
  closing_ = true;
  if (op_.in_flight()) {
    reactor_.cancel(op_);
    return;
  }
  if (retry_timer_) {
    reactor_.cancel_timer(*retry_timer_);
    retry_timer_.reset();
  }
  finish(errc::transport_closed);
}

void tcp_listener::finish(std::error_code why) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  auto cb = std::move(callback_);
  callback_ = nullptr;
  cb(why);  // last: the callback may destroy the listener
}

}  // namespace vessel::io
