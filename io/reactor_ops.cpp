// The reactor's op helpers: each fills one SQE for its owner and picks the better kernel path
// where features() allows it. Submission happens in batches at the end of the loop turn.

#include <cerrno>

#include "io/buffer_ring.hpp"
#include "io/reactor.hpp"

namespace vessel::io {

void reactor::accept(io_op& op, int listen_fd) {
  if (refuse_if_stopping(op)) return;
  auto* sqe = prepare(op);
  if (features_.multishot_accept) {
    io_uring_prep_multishot_accept(sqe, listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  } else {
    io_uring_prep_accept(sqe, listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  }
  io_uring_sqe_set_data(sqe, &op);
}

void reactor::connect(io_op& op, int fd, const sockaddr* addr, socklen_t len) {
  if (refuse_if_stopping(op)) return;
  auto* sqe = prepare(op);
  io_uring_prep_connect(sqe, fd, addr, len);
  io_uring_sqe_set_data(sqe, &op);
}

void reactor::recv(io_op& op, int fd, std::span<std::byte> buf, int flags) {
  if (refuse_if_stopping(op)) return;
  auto* sqe = prepare(op);
  io_uring_prep_recv(sqe, fd, buf.data(), buf.size(), flags);
  io_uring_sqe_set_data(sqe, &op);
}

void reactor::recv(io_op& op, int fd, buffer_ring& ring) {
  if (refuse_if_stopping(op)) return;
  auto* sqe = prepare(op);
  if (features_.multishot_recv) {
    io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
  } else {
    io_uring_prep_recv(sqe, fd, nullptr, 0, 0);  // one buffer from the group per arm
  }
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = ring.group();
  io_uring_sqe_set_data(sqe, &op);
}

void reactor::send(io_op& op, int fd, std::span<const std::byte> buf, int flags, zero_copy zc) {
  if (refuse_if_stopping(op)) return;
  auto* sqe = prepare(op);
  if (zc == zero_copy::when_large && features_.send_zc && buf.size() >= config_.zero_copy_threshold) {
    io_uring_prep_send_zc(sqe, fd, buf.data(), buf.size(), flags, 0);
  } else {
    io_uring_prep_send(sqe, fd, buf.data(), buf.size(), flags);
  }
  io_uring_sqe_set_data(sqe, &op);
}

void reactor::sendmsg(io_op& op, int fd, const msghdr* msg, int flags, zero_copy zc) {
  if (refuse_if_stopping(op)) return;
  std::size_t total = 0;
  for (std::size_t i = 0; i < msg->msg_iovlen; ++i) total += msg->msg_iov[i].iov_len;
  auto* sqe = prepare(op);
  if (zc == zero_copy::when_large && features_.sendmsg_zc && total >= config_.zero_copy_threshold) {
    io_uring_prep_sendmsg_zc(sqe, fd, msg, static_cast<unsigned>(flags));
  } else {
    io_uring_prep_sendmsg(sqe, fd, msg, static_cast<unsigned>(flags));
  }
  io_uring_sqe_set_data(sqe, &op);
}

void reactor::read(io_op& op, int fd, std::span<std::byte> buf, std::uint64_t offset) {
  if (refuse_if_stopping(op)) return;
  auto* sqe = prepare(op);
  io_uring_prep_read(sqe, fd, buf.data(), static_cast<unsigned>(buf.size()), offset);
  io_uring_sqe_set_data(sqe, &op);
}

void reactor::write(io_op& op, int fd, std::span<const std::byte> buf, std::uint64_t offset) {
  if (refuse_if_stopping(op)) return;
  auto* sqe = prepare(op);
  io_uring_prep_write(sqe, fd, buf.data(), static_cast<unsigned>(buf.size()), offset);
  io_uring_sqe_set_data(sqe, &op);
}

void reactor::poll_add(io_op& op, int fd, unsigned events) {
  if (refuse_if_stopping(op)) return;
  auto* sqe = prepare(op);
  io_uring_prep_poll_add(sqe, fd, events);
  io_uring_sqe_set_data(sqe, &op);
}

void reactor::cancel(io_op& op) {
  if (!op.in_flight()) return;
  auto* sqe = get_sqe();
  io_uring_prep_cancel(sqe, &op, 0);
  io_uring_sqe_set_data64(sqe, 0);  // its own CQE is of no interest: the op gets one
}

}  // namespace vessel::io
