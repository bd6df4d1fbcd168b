#include "io/tcp_transport.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

#include "io/errc.hpp"
#include "wire/errc.hpp"
#include "io/log.hpp"
#include "io/reactor.hpp"
#include "io/tcp_socket.hpp"

namespace vessel::io {
namespace {

// Prefix and the largest header the encoder produces, rounded up to keep entries 8-aligned.
constexpr std::size_t header_room = (wire::prefix_bytes + wire::max_encoded_header_bytes + 7) & ~7u;

// Reads of a readable socket per turn before the loop gets to its other work: a peer that
// streams must not starve the rest of the reactor (what is left is read on the next turn).
constexpr int max_reads_per_turn = 16;

// A payload with at least this much still to come is received into the handler's memory
// (payload_destination): below it, the extra recv(2) that stops at the payload's end costs more
// than the copy it saves.
constexpr std::size_t min_redirect_bytes = 32u << 10;

// After a large frame, the headers of this many more frames are read on their own too: the
// next large one often follows a few small ones (a collective chunk's 8-byte tail, an ack), and
// its payload goes straight to the handler's memory only if its header came in without it.
// A burst of small frames then takes a recv(2) per few hundred bytes, for a few frames only.
constexpr std::uint32_t header_first_after_large = 8;

}  // namespace

bool peer_is_on_this_host(int fd) noexcept {
  const auto peer = socket_address::peer_of(fd);
  if (!peer) return false;
  if (peer.value().family() == AF_UNIX) return true;
  const auto self = socket_address::local_of(fd);
  if (!self) return false;
  const sockaddr* p = peer.value().data();
  const sockaddr* s = self.value().data();
  if (p->sa_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in*>(p)->sin_addr;
    return (ntohl(a.s_addr) >> 24) == 127 ||
           a.s_addr == reinterpret_cast<const sockaddr_in*>(s)->sin_addr.s_addr;
  }
  if (p->sa_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6*>(p)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127) return true;
    return IN6_ARE_ADDR_EQUAL(&a, &reinterpret_cast<const sockaddr_in6*>(s)->sin6_addr);
  }
  return false;
}

tcp_transport::tcp_transport(reactor& r, int fd, transport_handler& handler,
                             tcp_transport_options options)
    : reactor_{r},
      fd_{fd},
      handler_{handler},
      options_{options},
      low_watermark_{options.low_watermark_bytes != 0 ? options.low_watermark_bytes
                                                      : options.send_queue_bytes / 2},
      slot_bytes_{header_room + ((options.copy_bytes + 7) & ~std::size_t{7})},
      local_peer_{peer_is_on_this_host(fd)},
      zero_copy_{local_peer_ ? zero_copy::never : options.send_zero_copy},
      readiness_{(options.poll_when_lent && r.config().lendable) || options.receive_by_readiness},
      // Not zeroed (each slot is written before it is sent): 672 KiB a connection, as the
      // decoder's buffer (wire/stream_decoder.cpp).
      slab_{std::make_unique_for_overwrite<std::byte[]>(
          slot_bytes_ * std::max<std::size_t>(options.send_queue_frames, 1))},
      ring_(std::max<std::size_t>(options.send_queue_frames, 1)),
      iov_(std::max<std::size_t>(options.max_iovecs, 3)),
      decoder_{options.limits} {
  for (std::size_t i = 0; i < ring_.size(); ++i) ring_[i].head = slab_.get() + i * slot_bytes_;
  const std::string_view cc = options.local_congestion_control;
  // An AF_UNIX socket has no congestion control to choose.
  if (local_peer_ && !cc.empty() && !congestion_control().empty() &&
      ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(), static_cast<socklen_t>(cc.size())) !=
          0) {
    const int why = errno;
    log::get("io").debug("tcp fd {}: congestion control '{}' refused ({}); keeping '{}'", fd, cc,
                         std::strerror(why), congestion_control());
  }
}

std::string tcp_transport::congestion_control() const {
  char name[16] = {};  // TCP_CA_NAME_MAX (linux/tcp.h)
  socklen_t len = sizeof name;
  if (fd_ < 0 || ::getsockopt(fd_, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return {};
  return std::string(name, ::strnlen(name, len));
}

tcp_transport::~tcp_transport() {
  assert(!send_op_.in_flight() && !recv_op_.in_flight() && !finish_pending_ &&
         "destroy a tcp_transport only after on_closed or after its reactor stopped");
  if (polled_) reactor_.remove_poller(*this);
  if (fd_ >= 0) ::close(fd_);
}

void tcp_transport::start() {
  if (state_ != state::open) return;
  if (readiness_ && !polled_) {
    reactor_.add_poller(*this);
    polled_ = true;
  }
  // A borrower reads the socket itself; the reactor thread arms the poll when it takes the loop
  // back (poll()). An op armed now would only go out then anyway (reactor::turn). A busy-polling
  // reactor thread reads it too, and arms the poll when it stops (spin_poll_ended()).
  if (readiness_ && reactor_.pollers_read()) return;
  if (!recv_op_.in_flight()) arm_recv();
}

// -- Sending -----------------------------------------------------------------------------------

// `copied`: the payload bytes to copy into the entry (send_copy's), else empty.
result<tcp_transport::entry*> tcp_transport::reserve(const wire::frame_header& header,
                                                     std::span<const std::byte> copied) {
  if (state_ != state::open) return errc::transport_closed;
  auto encoded = encoder_.encode_header(header);
  if (!encoded) return encoded.error();
  const auto head = encoded.value();
  const std::size_t copy_len = copied.size();
  const std::size_t frame_bytes = head.size() + header.payload_len;
  if (count_ == ring_.size() || (count_ > 0 && queued_bytes_ + frame_bytes > options_.send_queue_bytes)) {
    ++stats_.send_queue_full;
    want_writable_ = true;
    return errc::send_queue_full;
  }
  // An empty queue starts again at its first entry: a ping-pong then writes one hot entry instead
  // of walking the whole ring (~800 KiB with the defaults), a cold cache line per message.
  // Nothing refers to the entries: a send in flight keeps its frames counted until it completes.
  if (count_ == 0) {
    head_ = 0;
    head_offset_ = 0;
  }
  std::size_t slot = head_ + count_;
  if (slot >= ring_.size()) slot -= ring_.size();
  entry& e = ring_[slot];
  std::memcpy(e.head, head.data(), head.size());
  if (copy_len > 0) std::memcpy(e.head + head.size(), copied.data(), copy_len);
  e.head_len = static_cast<std::uint32_t>(head.size() + copy_len);
  ++count_;
  queued_bytes_ += frame_bytes;
  stats_.send_queue_high_water = std::max<std::uint64_t>(stats_.send_queue_high_water, queued_bytes_);
  return &e;
}

result<void> tcp_transport::send(const wire::frame_header& header, buffer_slice payload) {
  return send_parts(header, std::move(payload), {});
}

result<void> tcp_transport::send_parts(const wire::frame_header& header, buffer_slice first,
                                       buffer_slice second) {
  if (header.payload_len != first.size() + second.size()) {
    return make_error_code(wire::errc::bad_field);
  }
  auto e = reserve(header, {});
  if (!e) return e.error();
  e.value()->payload = std::move(first);
  e.value()->more = std::move(second);
  flush_direct();
  return outcome::success();
}

result<void> tcp_transport::send_copy(const wire::frame_header& header,
                                      std::span<const std::byte> payload) {
  if (payload.size() > options_.copy_bytes) return std::make_error_code(std::errc::message_size);
  if (header.payload_len != payload.size()) return make_error_code(wire::errc::bad_field);
  auto e = reserve(header, payload);
  if (!e) return e.error();
  flush_direct();
  return outcome::success();
}

void tcp_transport::flush_direct() {
  // Inside a receive dispatch the flush waits for the end of the batch (on_recv), so that every
  // reply produced by the batch leaves in one send.
  if (callbacks_running_ > 0 || !options_.direct_send) {
    if (callbacks_running_ == 0) flush();
    return;
  }
  if (corked_ || send_op_.in_flight() || count_ == 0 || state_ != state::open) return;
  const std::size_t bytes = build_iovecs();
  ssize_t n = 0;
  if (msg_.msg_iovlen == 1) {
    n = ::send(fd_, iov_[0].iov_base, iov_[0].iov_len, MSG_NOSIGNAL | MSG_DONTWAIT);
  } else if (bytes <= gather_.size()) {
    // A few small pieces (a header and a small payload): one contiguous send(2) costs less than
    // the kernel's copy-in of a msghdr and its iovecs (perf: ____sys_sendmsg, import_iovec).
    std::size_t at = 0;
    for (std::size_t i = 0; i < msg_.msg_iovlen; ++i) {
      std::memcpy(gather_.data() + at, iov_[i].iov_base, iov_[i].iov_len);
      at += iov_[i].iov_len;
    }
    n = ::send(fd_, gather_.data(), at, MSG_NOSIGNAL | MSG_DONTWAIT);
  } else {
    n = ::sendmsg(fd_, &msg_, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  if (n > 0) {
    advance(static_cast<std::size_t>(n));
  } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    // Reported like a failed io_uring send; the recv's cancellation completes the close.
    fail(error_from_errno(-errno));
    return;
  }
  flush();  // what the socket did not take, through the ring
}

void tcp_transport::uncork() noexcept {
  corked_ = false;
  flush_direct();
}

std::size_t tcp_transport::build_iovecs() noexcept {
  // Everything queued, from where the last partial send stopped.
  std::size_t n = 0;
  std::size_t bytes = 0;
  std::size_t skip = head_offset_;
  for (std::size_t i = 0, idx = head_; i < count_ && n + 3 <= iov_.size(); ++i) {
    const entry& e = ring_[idx];
    if (skip < e.head_len) {
      iov_[n++] = {e.head + skip, e.head_len - skip};
      bytes += e.head_len - skip;
      skip = 0;
    } else {
      skip -= e.head_len;
    }
    if (e.payload.size() > skip) {
      iov_[n++] = {e.payload.data() + skip, e.payload.size() - skip};
      bytes += e.payload.size() - skip;
      skip = 0;
    } else {
      skip -= e.payload.size();
    }
    if (e.more.size() > skip) {
      iov_[n++] = {e.more.data() + skip, e.more.size() - skip};
      bytes += e.more.size() - skip;
    }
    skip = 0;
    idx = idx + 1 == ring_.size() ? 0 : idx + 1;
  }
  msg_.msg_iov = iov_.data();
  msg_.msg_iovlen = n;
  return bytes;
}

void tcp_transport::flush() {
  if (send_op_.in_flight() || count_ == 0 || state_ != state::open) return;
  // A borrower's SQE would wait for the reactor thread (reactor::turn): while the loop is lent,
  // what the socket did not take is retried with direct sends on the borrower's turns (poll()).
  if (readiness_ && reactor_.lent()) return;
  build_iovecs();
  const std::size_t n = msg_.msg_iovlen;
  if (n == 1) {
    // One contiguous run (a small frame, or the tail of one): a plain SEND skips the kernel's
    // msghdr copy-in.
    reactor_.send(send_op_, fd_, {static_cast<const std::byte*>(iov_[0].iov_base), iov_[0].iov_len},
                  MSG_NOSIGNAL, zero_copy_);
    return;
  }
  reactor_.sendmsg(send_op_, fd_, &msg_, MSG_NOSIGNAL, zero_copy_);
}

void tcp_transport::advance(std::size_t n) noexcept {
  stats_.bytes_sent += n;
  queued_bytes_ -= n;
  while (n > 0 && count_ > 0) {
    entry& e = ring_[head_];
    const std::size_t left = e.head_len + e.payload.size() + e.more.size() - head_offset_;
    if (n < left) {
      head_offset_ += n;
      return;
    }
    n -= left;
    e.payload.reset();  // the block goes back to its pool once the bytes are on the wire
    e.more.reset();
    head_offset_ = 0;
    head_ = head_ + 1 == ring_.size() ? 0 : head_ + 1;
    --count_;
    ++stats_.frames_sent;
  }
}

void tcp_transport::on_send(int res, std::uint32_t flags) {
  if ((flags & IORING_CQE_F_NOTIF) != 0) {
    res = send_result_;  // the zero-copy send is over: its pages are released
  } else if ((flags & IORING_CQE_F_MORE) != 0) {
    send_result_ = res;  // zero-copy: the buffers stay pinned until the notification
    return;
  }
  if (completion_ends(res, false)) return;
  advance(static_cast<std::size_t>(res));
  flush();
  // What the handler queued goes out now (sends from callbacks wait for the callback's end).
  if (notify_writable_if_drained()) flush();
  maybe_finish();
}

bool tcp_transport::notify_writable_if_drained() {
  if (!want_writable_ || queued_bytes_ > low_watermark_) return false;
  want_writable_ = false;
  ++callbacks_running_;
  handler_.on_writable();
  --callbacks_running_;
  return true;
}

bool tcp_transport::completion_ends(int res, bool eof_at_zero) noexcept {
  if (state_ != state::open) {
    maybe_finish();
    return true;
  }
  if (res < 0 || (eof_at_zero && res == 0)) {
    // ECANCELED is our own close cancelling the op.
    fail(res == 0              ? make_error_code(errc::connection_closed)
         : res == -ECANCELED ? make_error_code(errc::transport_closed)
                             : error_from_errno(res));
    maybe_finish();
    return true;
  }
  return false;
}

// -- Receiving ---------------------------------------------------------------------------------

void tcp_transport::arm_recv() {
  if (readiness_) {
    reactor_.poll_add(recv_op_, fd_, POLLIN | POLLRDHUP);
    return;
  }
  auto space = decoder_.prepare();
  if (space.empty()) {
    // The decoder holds a whole unconsumed frame it cannot return: only a decoder bug gets here.
    fail(errc::bad_frame);
    return;
  }
  reactor_.recv(recv_op_, fd_, space);
}

void tcp_transport::on_recv(int res, std::uint32_t) {
  if (readiness_) return on_readable(res);
  if (completion_ends(res, true)) return;
  decoder_.commit(static_cast<std::size_t>(res));
  stats_.bytes_received += static_cast<std::size_t>(res);
  dispatch_frames();
  if (state_ == state::open) {
    flush_direct();  // the replies of the whole batch at once
    if (state_ == state::open) arm_recv();
  }
  maybe_finish();
}

void tcp_transport::dispatch_frames() {
  ++callbacks_running_;
  while (state_ == state::open) {
    auto next = decoder_.next();
    if (!next) {
      log::get("io").warn("tcp fd {}: bad frame from peer: {}", fd_, next.error().message());
      fail(errc::bad_frame);
      break;
    }
    if (!next.value()) {
      // A large payload still on its way goes straight where the handler wants it. Only with
      // synchronous recv(2) (readiness): an io_uring RECV into that memory could still write
      // after a close returned, while the handler already reuses it.
      if (const wire::frame_header* h = decoder_.awaiting_payload();
          readiness_ && h != nullptr &&
          h->payload_len - decoder_.payload_buffered() >= min_redirect_bytes) {
        const wire::fragment_place place =
            handler_.payload_destination(*h, decoder_.payload_arrived());
        if (!place.empty()) decoder_.redirect_payload(place.head, place.body);
      }
      break;
    }
    const wire::frame_view& frame = *next.value();
    ++stats_.frames_received;
    if (readiness_ && frame.header.payload_len >= min_redirect_bytes) {
      header_first_frames_ = header_first_after_large;
    } else if (header_first_frames_ > 0) {
      --header_first_frames_;
    }
    handler_.on_frame(frame.header, frame.payload, no_owner_);
  }
  --callbacks_running_;
}

void tcp_transport::on_readable(int res) {
  if (completion_ends(res, false)) return;
  read_ready();
  // While the loop is lent its borrower polls the socket, and nothing need wake the parked
  // reactor thread: the poll is armed again when that thread takes the loop back (poll()). The
  // same while the reactor thread busy-polls, until it stops (spin_poll_ended()).
  if (state_ == state::open && !reactor_.pollers_read()) arm_recv();
  maybe_finish();
}

void tcp_transport::read_ready() {
  for (int reads = 0; reads < max_reads_per_turn && state_ == state::open; ++reads) {
    auto space = decoder_.prepare();
    if (space.empty()) {
      fail(errc::bad_frame);  // a whole unconsumed frame the decoder cannot return: a bug
      return;
    }
    // While large frames flow, a recv stops at the end of a large frame and reads the next
    // header (nearly) alone: each large payload can then go straight to the handler's memory
    // (dispatch_frames) instead of arriving in the buffer behind the frames before it.
    if (const wire::frame_header* h = decoder_.awaiting_payload();
        readiness_ && h != nullptr && h->payload_len >= min_redirect_bytes) {
      space = space.first(std::min(space.size(), h->payload_len - decoder_.payload_buffered()));
    } else if (header_first_frames_ > 0 && decoder_.awaiting_header()) {
      space = space.first(header_room);
    }
    const ssize_t n = ::recv(fd_, space.data(), space.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) fail(error_from_errno(-errno));
      break;
    }
    if (n == 0) {
      fail(errc::connection_closed);
      break;
    }
    decoder_.commit(static_cast<std::size_t>(n));
    stats_.bytes_received += static_cast<std::size_t>(n);
    dispatch_frames();
    if (static_cast<std::size_t>(n) < space.size()) break;  // drained: no EAGAIN round trip
    // A borrower's request may be done: what is left stays in the socket for its next turn.
    if (reactor_.lent() && reactor_.completion_noted()) break;
  }
  if (state_ == state::open) flush_direct();  // the replies of the whole batch at once
}

void tcp_transport::poll() noexcept {
  poll_turn(true);
}

int tcp_transport::readiness_fd() const noexcept {
  return state_ == state::open && callbacks_running_ == 0 ? fd_ : -1;
}

void tcp_transport::poll_without_input() noexcept {
  poll_turn(false);
}

void tcp_transport::poll_turn(bool may_have_input) noexcept {
  if (callbacks_running_ > 0) return;
  if (state_ != state::open) {
    // A direct send that failed while the loop was lent (fail() in flush_direct) left no op in
    // flight whose completion would end the close: the next turn of either holder ends it.
    maybe_finish();  // may destroy this transport (on_closed)
    return;
  }
  if (reactor_.lent()) {
    if (may_have_input) read_ready();
    if (state_ == state::open && count_ > 0 && !send_op_.in_flight()) {
      flush_direct();
      if (state_ == state::open && notify_writable_if_drained()) flush_direct();
    }
    maybe_finish();  // may destroy this transport (on_closed)
    return;
  }
  // The reactor thread has the loop back: it waits for the socket again, and sends through the
  // ring what borrowers left queued.
  if (!recv_op_.in_flight()) arm_recv();
  flush();
}

bool tcp_transport::spin_poll() noexcept {
  // A poll still armed from before the spin began tells of the next input itself.
  if (state_ != state::open || callbacks_running_ > 0 || recv_op_.in_flight()) return false;
  const auto before = stats_.bytes_received;
  read_ready();
  const bool found = stats_.bytes_received != before || state_ != state::open;
  if (state_ != state::open) maybe_finish();  // may destroy this transport (on_closed)
  return found;
}

void tcp_transport::spin_poll_ended() noexcept {
  if (state_ == state::open && !recv_op_.in_flight()) arm_recv();
}

// -- Ending ------------------------------------------------------------------------------------

void tcp_transport::fail(std::error_code why) noexcept {
  if (state_ != state::open) return;
  state_ = state::closing;
  reason_ = why;
  // Cancel what is in flight; each op's final completion calls maybe_finish().
  reactor_.cancel(recv_op_);
  reactor_.cancel(send_op_);
  if (!recv_op_.in_flight() && !send_op_.in_flight() && !finish_pending_) {
    // Not from here: the handler's on_closed may destroy this transport, and fail() runs inside
    // its calls (a send from the handler, a frame it is handed).
    finish_pending_ = reactor_.post(work_item{&tcp_transport::finish_posted, this});
  }
}

void tcp_transport::finish_posted(void* self) noexcept {
  auto* t = static_cast<tcp_transport*>(self);
  t->finish_pending_ = false;
  t->maybe_finish();  // may destroy the transport (on_closed)
}

void tcp_transport::close() noexcept {
  fail(errc::transport_closed);
  maybe_finish();
}

void tcp_transport::maybe_finish() noexcept {
  if (state_ != state::closing || callbacks_running_ > 0 || send_op_.in_flight() ||
      recv_op_.in_flight() || finish_pending_)
    return;
  state_ = state::closed;
  for (; count_ > 0; --count_) {
    ring_[head_].payload.reset();
    ring_[head_].more.reset();
    head_ = head_ + 1 == ring_.size() ? 0 : head_ + 1;
  }
  queued_bytes_ = 0;
  head_offset_ = 0;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (polled_) {
    reactor_.remove_poller(*this);
    polled_ = false;
  }
  // Last: the handler may destroy this transport.
  handler_.on_closed(reason_);
}

}  // namespace vessel::io
