#include "actors/peer_link.hpp"

#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "actors/errc.hpp"
#include "actors/link_credit.hpp"
#include "actors/mesh_connection.hpp"
#include "actors/mesh_impl.hpp"
#include "io/errc.hpp"
#include "io/log.hpp"

namespace vessel::actors {
namespace {

link_sender_config sender_config(const mesh_config& c) {
  link_sender_config s = c.sender;
  s.initial_credit = c.window_bytes;
  s.message_overhead = message_credit_overhead;
  return s;
}

link_receiver_config receiver_config(const mesh_config& c) {
  link_receiver_config r = c.receiver;
  r.window_bytes = c.window_bytes;
  r.message_overhead = message_credit_overhead;
  return r;
}

wire::reassembly_limits reassembly_limits_for(const mesh::impl& m) {
  wire::reassembly_limits l;
  l.max_message_bytes = m.pool.max_block_size();
  l.max_fragments = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(UINT32_MAX, l.max_message_bytes / m.config.fragment_bytes + 1));
  return l;
}

template <class Body>
wire::frame_header control_frame(const Body& body) {
  wire::frame_header h;
  h.body = body;
  return h;
}

}  // namespace

peer_link::peer_link(mesh::impl& owner, std::uint32_t peer)
    : owner_{owner},
      peer_{peer},
      sender_{sender_config(owner.config)},
      receiver_{receiver_config(owner.config)},
      liveness_{owner.config.liveness, now()},
      reassembler_{reassembly_limits_for(owner)},
      fragment_bytes_{owner.config.fragment_bytes},
      queue_(std::max<std::size_t>(owner.config.max_queued_messages, 1)),
      backoff_{owner.config.redial,
               (std::uint64_t{owner.config.self_rank} << 32) ^ peer ^ owner.config.incarnation} {
  // Blocking on purpose: io_uring polls a blocking timerfd, but may answer -EAGAIN at once for a
  // non-blocking one.
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  if (timer_fd_ < 0) throw std::system_error(errno, std::generic_category(), "timerfd_create");
}

peer_link::~peer_link() {
  if (timer_fd_ >= 0) ::close(timer_fd_);
}

link_time peer_link::now() noexcept {
  return std::chrono::duration_cast<link_time>(std::chrono::steady_clock::now().time_since_epoch());
}

link_time peer_link::coarse_now() noexcept {
  // The same timeline as steady_clock (CLOCK_MONOTONIC), as of the last tick.
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec};
}

bool peer_link::dials() const noexcept {
  return owner_.config.self_rank > peer_;
}

void peer_link::start() {
  if (!timer_op_.in_flight()) {
    owner_.reactor.read(timer_op_, timer_fd_,
                        std::as_writable_bytes(std::span{&timer_op_.expirations, 1}));
  }
  owner_.publish(peer_, state_, {});
  if (dials()) start_dialing();
}

void peer_link::set_state(peer_state s, std::error_code why) {
  state_ = s;
  stats_.state = s;
  owner_.publish(peer_, s, why);
}

// ---------------------------------------------------------------------------------- send side

result<void> peer_link::send(std::uint64_t tag, io::buffer_slice payload, io::buffer_slice tail) {
  if (closing_) return make_error_code(errc::mesh_closed);
  if (state_ == peer_state::down) return make_error_code(errc::mesh_peer_down);
  if (payload.size() + tail.size() > owner_.pool.max_block_size()) {
    return make_error_code(errc::mesh_message_too_large);
  }
  if (queue_count_ == queue_.size()) {
    blocked_ = true;
    ++stats_.would_block;
    return make_error_code(errc::link_would_block);
  }
  pending_message& m = queue_[(queue_head_ + queue_count_) % queue_.size()];
  m.tag = tag;
  m.message_id = next_message_id_++;
  m.payload = std::move(payload);
  m.tail = std::move(tail);
  m.next_fragment = 0;
  ++queue_count_;
  said_closing_ = false;  // the peer takes this data as taking our closing ack back
  pump();
  return outcome::success();
}

void peer_link::pump() {
  if (pumping_) return;  // an on_writable() handler sent again: the loop below picks it up
  pumping_ = true;
  while (queue_count_ > 0) {
    pending_message& m = queue_[queue_head_];
    const std::uint64_t head = m.payload.size();
    const std::uint64_t total = head + m.tail.size();
    const auto count =
        static_cast<std::uint32_t>(total == 0 ? 1 : (total - 1) / fragment_bytes_ + 1);
    while (m.next_fragment < count) {
      const std::uint64_t offset = std::uint64_t{m.next_fragment} * fragment_bytes_;
      const std::uint64_t len = std::min<std::uint64_t>(fragment_bytes_, total - offset);
      if (!sender_.writable(len)) break;
      wire::frame_header h;
      h.payload_len = static_cast<std::uint32_t>(len);
      h.body = wire::data_fields{owner_.config.self_rank, peer_, m.tag, m.message_id,
                                 m.next_fragment,         count, total, offset};
      // A fragment that straddles the message's two parts goes out in two (send_parts).
      io::buffer_slice first, second;
      if (offset + len <= head) {
        first = m.payload.subslice(offset, len);
      } else if (offset >= head) {
        first = m.tail.subslice(offset - head, len);
      } else {
        first = m.payload.subslice(offset, head - offset);
        second = m.tail.subslice(0, offset + len - head);
      }
      auto submitted = sender_.submit(h, std::move(first), std::move(second));
      if (!submitted) {
        // writable() said yes: only a misconfiguration (fragment over the send bound) gets here.
        log::get("actors").error("link to rank {}: message {} dropped: {}", peer_, m.message_id,
                                 submitted.error().message());
        m.next_fragment = count;
        break;
      }
      ++m.next_fragment;
    }
    if (m.next_fragment < count) break;
    ++stats_.messages_sent;
    m.payload.reset();
    m.tail.reset();
    queue_head_ = (queue_head_ + 1) % queue_.size();
    --queue_count_;
  }
  transmit();
  pumping_ = false;
  if (blocked_ && queue_count_ < queue_.size()) {
    blocked_ = false;
    owner_.observer.on_writable(peer_);
  }
}

void peer_link::transmit() {
  if (connection_ == nullptr || state_ != peer_state::up) return;
  if (stalled_) {
    if (!send_frame(*stalled_)) return;
    stalled_.reset();
  }
  // What goes now (a message's fragments, as far as credit allows) leaves in one write.
  io::transport& t = connection_->transport();
  t.cork();
  while (const outgoing_frame* f = sender_.next_transmit()) {
    if (!send_frame(*f)) {
      stalled_ = *f;  // a header copy and a slice handle: no allocation
      break;
    }
  }
  t.uncork();
}

bool peer_link::send_frame(const outgoing_frame& f) {
  if (connection_ == nullptr) return false;
  auto sent = f.more.empty() ? connection_->transport().send(f.header, f.payload)
                             : connection_->transport().send_parts(f.header, f.payload, f.more);
  if (!sent) return false;  // queue full: on_writable() resumes; closed: on_closed follows
  liveness_.on_sent(coarse_now());
  return true;
}

bool peer_link::send_control(const wire::frame_header& header) {
  if (connection_ == nullptr) return false;
  if (!connection_->transport().send_copy(header, {})) return false;
  liveness_.on_sent(coarse_now());
  return true;
}

void peer_link::on_writable() {
  flush_ack(now());
  pump();
}

// ------------------------------------------------------------------------------- receive side

void peer_link::on_frame(const wire::frame_header& header, std::span<const std::byte> payload) {
  owner_.reactor.note_arrival();
  // Coarse: liveness needs no better. What needs the precise clock reads it itself: the start of
  // the delayed-ack timer (on_data) and RTT samples (heartbeats). An ack due by delay that the
  // coarse time misses in flush_ack() below goes out when the ack timer fires.
  const link_time t = coarse_now();
  liveness_.on_received(t);
  switch (header.kind()) {
    case wire::frame_kind::data:
      on_data(header, std::get<wire::data_fields>(header.body), payload, t);
      break;
    case wire::frame_kind::ack: {
      const auto& ack = std::get<wire::ack_fields>(header.body);
      auto acked = sender_.on_ack(ack.cumulative_seq);
      if (!acked) return fail(acked.error(), "bad ack");
      peer_closing_ = peer_closing_ || ack.closing;
      pump();
      break;
    }
    case wire::frame_kind::credit: {
      auto granted = sender_.on_credit(std::get<wire::credit_fields>(header.body).bytes);
      if (!granted) return fail(granted.error(), "bad credit grant");
      pump();
      break;
    }
    case wire::frame_kind::heartbeat: {
      if (auto answer =
              liveness_.on_heartbeat(std::get<wire::heartbeat_fields>(header.body), now())) {
        send_control(control_frame(*answer));
      }
      break;
    }
    case wire::frame_kind::hello:
    case wire::frame_kind::collective:
    case wire::frame_kind::device:
      return fail(make_error_code(errc::mesh_protocol_error), "unexpected frame kind");
  }
  if (connection_ != nullptr) flush_ack(t);
}

wire::fragment_place peer_link::payload_destination(const wire::frame_header& header,
                                                    std::span<const std::byte> arrived) {
  if (header.kind() != wire::frame_kind::data || header.seq != receiver_.last_seq_seen() + 1) {
    return {};
  }
  const auto& data = std::get<wire::data_fields>(header.body);
  if (data.src != peer_ || data.dst != owner_.config.self_rank) return {};
  if (data.fragment_index == 0) {
    // Where the message lands depends on its first bytes (a collective's chunk header): with
    // those in, it is begun now rather than once the whole fragment sits in the transport's
    // buffer, so that the fragment need not be copied out of there.
    if (arrived.size() < std::min<std::uint64_t>(header.payload_len, message_start_bytes)) {
      return {};
    }
    if (!begun_on_arrival(data) && !begin_message(data, arrived)) return {};
  } else if (!reassembler_.active() || reassembler_.message_id() != data.message_id) {
    return {};
  }
  return reassembler_.placement_of(data.fragment_index, data.fragment_count,
                                   data.fragment_offset, data.total_len, header.payload_len);
}

bool peer_link::begun_on_arrival(const wire::data_fields& data) const noexcept {
  // Only payload_destination leaves a message begun with nothing accepted: on_data accepts the
  // first fragment right after beginning it. Kept over a cut connection, whose resend of the
  // fragment (the same message, not yet acked) finds its message begun.
  return reassembler_.active() && reassembler_.message_id() == data.message_id &&
         reassembler_.received_fragments() == 0;
}

bool peer_link::begin_message(const wire::data_fields& data,
                              std::span<const std::byte> first_bytes) {
  if (data.total_len > owner_.pool.max_block_size()) {
    fail(make_error_code(errc::mesh_message_too_large), "message over the largest block");
    return false;
  }
  abandon_landing(false);  // one message at a time: a new first fragment ends the old one
  const message_destination landing = owner_.observer.on_message_begin(
      message_start{peer_, data.tag, data.message_id, data.total_len, first_bytes});
  if (!landing.empty()) {
    landing_message_ = data.message_id;
  } else if (reassembly_block_ = owner_.pool.try_acquire(data.total_len); !reassembly_block_) {
    // Not accepted yet: the peer resends it after the reconnect, by when blocks may be back.
    log::get("actors").warn("link to rank {}: no pool block for a {}-byte message; reconnecting",
                            peer_, data.total_len);
    if (connection_ != nullptr) connection_->close();
    return false;
  }
  reassembly_tag_ = data.tag;
  auto begun = landing.empty()
                   ? reassembler_.begin(data.message_id, data.total_len, data.fragment_count,
                                        reassembly_block_.bytes())
                   : reassembler_.begin(data.message_id, data.total_len, data.fragment_count,
                                        landing.head, landing.body, landing.combine);
  if (!begun) {
    fail(begun.error(), "bad message layout");
    return false;
  }
  if (landing.combine) ++stats_.combined_on_arrival;
  in_progress_charged_ = 0;
  return true;
}

void peer_link::on_data(const wire::frame_header& header, const wire::data_fields& data,
                        std::span<const std::byte> payload, link_time t) {
  if (header.seq != 0 && header.seq <= receiver_.last_seq_seen()) {
    (void)receiver_.on_frame(header, receiver_.acks_owed() ? t : now());  // counts the duplicate
    return;
  }
  if (data.src != peer_ || data.dst != owner_.config.self_rank) {
    return fail(make_error_code(errc::mesh_protocol_error), "data frame with wrong src/dst");
  }
  peer_closing_ = false;  // it sent more after all: its closing ack spoke too soon
  const bool first = data.fragment_index == 0;
  if (first && !begun_on_arrival(data) && !begin_message(data, payload)) return;
  // The frame that starts the delayed-ack timer stamps it precisely (200 µs against a tick).
  auto verdict = receiver_.on_frame(header, receiver_.acks_owed() ? t : now());
  if (!verdict) return fail(verdict.error(), "bad data frame");
  if (verdict.value() == receive_verdict::duplicate) {
    if (first) abandon_landing(false);
    return;
  }
  if (!reassembler_.active() || reassembler_.message_id() != data.message_id) {
    return fail(make_error_code(errc::mesh_protocol_error), "fragment of no message in progress");
  }
  const std::uint64_t length = header.payload_len;
  const bool placed = payload.size() != length;
  if (placed) {
    // Received in two parts where payload_destination placed it: `payload` is the part after
    // the message's head, and the head's part is in place too.
    const wire::fragment_place place = reassembler_.placement_of(
        data.fragment_index, data.fragment_count, data.fragment_offset, data.total_len, length);
    if (place.body.data() != payload.data() || place.body.size() != payload.size() ||
        place.size() != length) {
      return fail(make_error_code(errc::mesh_protocol_error), "fragment not where it was placed");
    }
  }
  auto accepted = placed ? reassembler_.accept_placed(data.fragment_index, data.fragment_count,
                                                      data.fragment_offset, data.total_len, length)
                         : reassembler_.accept(data.fragment_index, data.fragment_count,
                                               data.fragment_offset, data.total_len, payload);
  if (!accepted) return fail(accepted.error(), "bad fragment");
  // What the sender was charged for this frame (link_credit.hpp), in the units release() repays.
  const std::uint64_t charged = frame_credit(header, message_credit_overhead);
  // The overdraft (mesh.hpp): the fragments of one multi-fragment message at a time count as
  // consumed at once, so a message larger than the window still completes.
  if (data.fragment_count > 1 && (overdraft_ == 0 || overdraft_message_ == data.message_id)) {
    overdraft_ += charged;
    overdraft_message_ = data.message_id;
    report_consumed(charged);
  } else {
    in_progress_charged_ += charged;
  }
  if (!reassembler_.complete()) return;
  // A large message's sender may wait for its ack (a lent send, comm.cpp) instead of streaming
  // on: ack it now (on_frame flushes), not after the delayed-ack timer. Small messages keep the
  // coalescing; a large one is rare enough per byte that one more ack frame costs nothing.
  if (data.total_len >= fragment_bytes_) receiver_.ack_soon();
  in_progress_charged_ = 0;
  delivered_unreleased_ += message_credit(data.total_len);
  ++stats_.messages_received;
  inbound_message m{peer_, data.tag, data.message_id, {}, landing_message_.has_value(),
                    data.total_len};
  if (!m.landed) m.payload = std::move(reassembly_block_).slice(0, data.total_len);
  reassembly_block_.reset();
  landing_message_.reset();
  owner_.observer.on_message(std::move(m));
}

std::optional<message_start> peer_link::in_progress() const {
  if (!reassembler_.active() || reassembler_.complete() || landing_message_) return std::nullopt;
  return message_start{peer_, reassembly_tag_, reassembler_.message_id(),
                       reassembler_.total_len(), {}};
}

bool peer_link::divert(std::uint64_t message_id, const message_destination& into) {
  // What arrived is in a pool block; a combined body needs it folded, not copied over.
  if (into.combine || !in_progress() || reassembler_.message_id() != message_id) return false;
  if (!reassembler_.retarget(into.head, into.body)) return false;
  // The block stays until the message completes: a transport may be receiving a fragment's
  // payload into it right now (payload_destination), and accept() copies that one over.
  landing_message_ = message_id;
  return true;
}

void peer_link::release(std::size_t bytes) {
  if (bytes > delivered_unreleased_) {
    if (!over_release_logged_) {
      log::get("actors").warn("link to rank {}: released {} bytes, only {} delivered and held",
                              peer_, bytes, delivered_unreleased_);
      over_release_logged_ = true;
    }
    bytes = delivered_unreleased_;
  }
  delivered_unreleased_ -= bytes;
  const std::uint64_t repay = std::min<std::uint64_t>(bytes, overdraft_);
  overdraft_ -= repay;
  std::uint64_t consumed = bytes - repay;
  // A multi-fragment message that began while an earlier one held the overdraft was charged to
  // the window. If its fragments filled the window, the sender has no credit for the rest: it
  // can never complete, nothing more is released, and repaying the earlier overdraft returns no
  // credit either. That deadlocked streams of messages over the window (vessel-bench p2p, 4 MiB
  // over shm, whenever the next message's first window arrived before the app released the
  // previous one). So the freed overdraft passes to the message in progress at once: what it
  // was charged is consumed now, and its later release repays it like any overdraft.
  if (overdraft_ == 0 && in_progress_charged_ != 0 && reassembler_.active() &&
      !reassembler_.complete()) {
    overdraft_ = in_progress_charged_;
    overdraft_message_ = reassembler_.message_id();
    consumed += in_progress_charged_;
    in_progress_charged_ = 0;
  }
  report_consumed(consumed);
}

void peer_link::report_consumed(std::uint64_t bytes) {
  if (bytes == 0) return;
  auto grant = receiver_.on_consumed(bytes);
  if (!grant) {
    log::get("actors").error("link to rank {}: credit accounting: {}", peer_,
                             grant.error().message());
    return;
  }
  // Not connected: lost, and restored by the grant after the next handshake.
  if (grant.value() && state_ == peer_state::up) send_control(control_frame(*grant.value()));
}

void peer_link::flush_ack(link_time t) {
  if (connection_ == nullptr || state_ != peer_state::up) return;
  if (owed_ack_) {
    if (!send_control(control_frame(wire::ack_fields{*owed_ack_}))) return;
    owed_ack_.reset();
  }
  if (auto ack = receiver_.poll_ack(t)) {
    if (!send_control(control_frame(*ack))) owed_ack_ = ack->cumulative_seq;
  }
  if (auto due = receiver_.ack_deadline()) arm_timer(*due);
}

// --------------------------------------------------------------------------------------- timer

void peer_link::arm_timer(link_time deadline) {
  if (deadline >= armed_ || closing_) return;
  armed_ = deadline;
  itimerspec spec{};
  const auto ns = std::max<std::int64_t>(deadline.count(), 1);
  spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  ::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void peer_link::on_timer(int res) {
  if (closing_ || res == -ECANCELED) {
    owner_.check_closed();
    return;
  }
  armed_ = link_time::max();
  owner_.reactor.read(timer_op_, timer_fd_,
                      std::as_writable_bytes(std::span{&timer_op_.expirations, 1}));
  service_timer();
}

void peer_link::service_timer() {
  if (connection_ == nullptr || state_ != peer_state::up) return;
  const link_time t = now();
  if (liveness_.peer_silent(t)) {
    log::get("actors").warn(
        "link to rank {}: silent for over {} ms: down", peer_,
        std::chrono::duration_cast<std::chrono::milliseconds>(owner_.config.liveness.peer_deadline)
            .count());
    return go_down(make_error_code(errc::link_peer_silent));
  }
  if (auto probe = liveness_.on_idle_tick(t)) {
    if (connection_ != nullptr) (void)connection_->transport().send_copy(control_frame(*probe), {});
  }
  flush_ack(t);
  arm_timer(std::min(liveness_.next_heartbeat_at(), liveness_.silent_at()));
}

// --------------------------------------------------------------------------- connection events

std::uint64_t peer_link::resume_point(std::optional<std::uint64_t> incarnation) const noexcept {
  if (!peer_incarnation_ || !incarnation || *incarnation != *peer_incarnation_) return 0;
  return receiver_.last_seq_seen();
}

void peer_link::attach(mesh_connection& c, const handshake_accepted& accepted) {
  if (closing_) {
    c.close();
    return;
  }
  if (connection_ != nullptr && connection_ != &c) {
    // The peer dialled again before we saw the old connection die (half-open): replace it.
    mesh_connection* old = connection_;
    connection_ = nullptr;
    old->detach();
    old->close();
  }
  if (reconnect_timer_) owner_.reactor.cancel_timer(*reconnect_timer_);
  if (redial_timer_) owner_.reactor.cancel_timer(*redial_timer_);
  if (down_poll_timer_) owner_.reactor.cancel_timer(*down_poll_timer_);
  reconnect_timer_.reset();
  redial_timer_.reset();
  down_poll_timer_.reset();
  revived_ = false;
  backoff_.reset();

  const bool restarted = peer_incarnation_ && *peer_incarnation_ != accepted.peer_incarnation;
  const bool fresh = !peer_incarnation_ || restarted;
  if (state_ == peer_state::down && !restarted) {
    // Down is final for an incarnation: only a restarted peer gets a new stream.
    log::get("actors").info("link to rank {}: refusing a reconnect: the link is down", peer_);
    c.detach();
    c.close();
    return;
  }
  if (restarted) {
    // What the old process had not acked is dropped, not resent: the new process has none of the
    // old one's state (its receiver starts at seq 0, its app at the beginning), and a message
    // meant for that state could be misread by the new one (tags and message ids restart). The
    // app learns of the restart (peer_state::restarted, runtime::peer_restarts) and re-sends
    // what it must through its own rejoin protocol (examples/README.md, data_parallel_sgd).
    log::get("actors").warn("link to rank {}: peer restarted (incarnation {} -> {}): new stream",
                            peer_, *peer_incarnation_, accepted.peer_incarnation);
    reset_streams();
    ++stats_.restarts;
    set_state(peer_state::restarted, {});
  } else if (ever_connected_) {
    ++stats_.reconnects;
  }
  peer_incarnation_ = accepted.peer_incarnation;
  ever_connected_ = true;
  connection_ = &c;
  stalled_.reset();
  owed_ack_.reset();
  said_closing_ = false;  // the peer may not have read it on the old connection: said again

  // A fresh stream starts at 0 whatever the peer's hello says (it spoke of another stream).
  auto resumed = sender_.resume(fresh ? 0 : accepted.peer_last_seq_seen);
  if (!resumed) return fail(resumed.error(), "peer resumes from a seq we never sent");
  const link_time t = now();
  liveness_.on_sent(t);
  liveness_.on_received(t);
  state_ = peer_state::up;  // before sending: transmit() checks it
  send_control(control_frame(receiver_.on_reconnect()));
  set_state(peer_state::up, {});
  arm_timer(std::min(liveness_.next_heartbeat_at(), liveness_.silent_at()));
  pump();
}

void peer_link::on_connection_closed(mesh_connection& c, std::error_code why) {
  if (&c != connection_) return;
  connection_ = nullptr;
  stalled_.reset();
  if (closing_ || state_ == peer_state::down) return;
  lost_connection(why);
}

void peer_link::lost_connection(std::error_code why) {
  log::get("actors").info("link to rank {}: connection lost ({}): reconnecting", peer_,
                          why.message());
  set_state(peer_state::reconnecting, why);
  if (!reconnect_timer_) {
    reconnect_timer_ = owner_.reactor.add_timer(owner_.config.reconnect_deadline, [this] {
      reconnect_timer_.reset();
      log::get("actors").warn("link to rank {}: not back within {} ms: down", peer_,
                              owner_.config.reconnect_deadline.count());
      go_down(make_error_code(errc::mesh_reconnect_timeout));
    });
  }
  if (dials()) start_dialing();
}

void peer_link::go_down(std::error_code why) {
  if (state_ == peer_state::down) return;
  if (connection_ != nullptr) {
    mesh_connection* c = connection_;
    connection_ = nullptr;
    c->detach();
    c->close();
  }
  if (reconnect_timer_) owner_.reactor.cancel_timer(*reconnect_timer_);
  if (redial_timer_) owner_.reactor.cancel_timer(*redial_timer_);
  reconnect_timer_.reset();
  redial_timer_.reset();
  revived_ = false;
  stalled_.reset();
  // Down is final for this incarnation: nothing kept for a resend ever goes, and a send that lent
  // its memory (comm's send_lent) waits for these handles.
  sender_.drop_payloads();
  abandon_landing(true);
  // What waits for this peer will never go: release the app's blocks.
  while (queue_count_ > 0) {
    queue_[queue_head_].payload.reset();
    queue_head_ = (queue_head_ + 1) % queue_.size();
    --queue_count_;
  }
  set_state(peer_state::down, why);
  arm_down_poll();
}

void peer_link::fail(std::error_code why, const char* what) {
  log::get("actors").error("link to rank {}: {}: {}: down", peer_, what, why.message());
  go_down(why);
}

void peer_link::fresh_reassembler() {
  in_place_before_reset_ += reassembler_.counters().in_place;
  reassembler_ = wire::reassembler{reassembly_limits_for(owner_)};
}

void peer_link::abandon_landing(bool final) {
  if (!landing_message_) return;
  const std::uint64_t id = *landing_message_;
  landing_message_.reset();
  fresh_reassembler();  // writes there no more
  owner_.observer.on_message_abandoned(peer_, id, final);
}

void peer_link::reset_streams() {
  abandon_landing(false);
  sender_ = link_sender{sender_config(owner_.config)};
  receiver_ = link_receiver{receiver_config(owner_.config)};
  fresh_reassembler();
  reassembly_block_.reset();
  while (queue_count_ > 0) {
    queue_[queue_head_].payload.reset();
    queue_head_ = (queue_head_ + 1) % queue_.size();
    --queue_count_;
  }
  next_message_id_ = 1;
  delivered_unreleased_ = 0;
  overdraft_ = 0;
  overdraft_message_ = 0;
  in_progress_charged_ = 0;
  stalled_.reset();
  owed_ack_.reset();
  peer_closing_ = false;
}

void peer_link::start_dialing() {
  if (closing_ || (state_ == peer_state::down && !revived_) || connection_ != nullptr ||
      redial_timer_) {
    return;
  }
  owner_.dial(*this);
}

void peer_link::dial_failed(std::error_code why) {
  if (closing_ || connection_ != nullptr) return;
  // The peer may be a new process at a new address: the worker re-reads its record (one read in
  // flight at a time) while the backoff below runs; address_changed() cuts the wait short.
  if (dials()) owner_.request_refresh(peer_);
  if (state_ == peer_state::down && !revived_) return;
  const auto delay = backoff_.next().value_or(owner_.config.redial.max_delay);
  log::get("actors").debug("link to rank {}: dial failed ({}), again in {} us", peer_,
                           why.message(),
                           std::chrono::duration_cast<std::chrono::microseconds>(delay).count());
  redial_timer_ = owner_.reactor.add_timer(delay, [this] {
    redial_timer_.reset();
    start_dialing();
  });
}

void peer_link::address_changed() {
  if (closing_ || !dials() || connection_ != nullptr) return;
  if (state_ == peer_state::down) {
    log::get("actors").info(
        "link to rank {}: down, but the rank republished its address: dialling "
        "its next incarnation",
        peer_);
    revived_ = true;
    if (down_poll_timer_) owner_.reactor.cancel_timer(*down_poll_timer_);
    down_poll_timer_.reset();
  }
  if (redial_timer_) owner_.reactor.cancel_timer(*redial_timer_);
  redial_timer_.reset();
  backoff_.reset();
  start_dialing();
}

void peer_link::arm_down_poll() {
  // A down peer we dial is asked for no more, but a launcher may restart it: watch its record.
  // (A peer that dials us needs no watch: its next incarnation dials in by itself.)
  if (closing_ || !dials() || state_ != peer_state::down || revived_ || down_poll_timer_) return;
  down_poll_timer_ =
      owner_.reactor.add_timer(std::max<std::chrono::nanoseconds>(owner_.config.redial.max_delay,
                                                                  std::chrono::milliseconds{200}),
                               [this] {
                                 down_poll_timer_.reset();
                                 owner_.request_refresh(peer_);
                                 arm_down_poll();
                               });
}

void peer_link::drop_connection() {
  if (connection_ != nullptr) connection_->close();
}

void peer_link::close() {
  if (closing_) return;
  closing_ = true;
  if (reconnect_timer_) owner_.reactor.cancel_timer(*reconnect_timer_);
  if (redial_timer_) owner_.reactor.cancel_timer(*redial_timer_);
  if (down_poll_timer_) owner_.reactor.cancel_timer(*down_poll_timer_);
  reconnect_timer_.reset();
  redial_timer_.reset();
  down_poll_timer_.reset();
  if (connection_ != nullptr) {
    mesh_connection* c = connection_;
    connection_ = nullptr;
    c->detach();
    c->close();
  }
  if (timer_op_.in_flight()) owner_.reactor.cancel(timer_op_);
  stalled_.reset();
  sender_.drop_payloads();  // nothing is resent after close: lent memory goes back
  abandon_landing(true);
  while (queue_count_ > 0) {
    queue_[queue_head_].payload.reset();
    queue_head_ = (queue_head_ + 1) % queue_.size();
    --queue_count_;
  }
  reassembly_block_.reset();
  if (state_ != peer_state::down) set_state(peer_state::down, make_error_code(errc::mesh_closed));
}

bool peer_link::settle() {
  if (state_ == peer_state::down) return true;
  const bool ours_acked =
      queue_count_ == 0 && sender_.unacked_frames() == 0 && sender_.queued_frames() == 0;
  if (connection_ != nullptr && state_ == peer_state::up) {
    receiver_.ack_soon();
    flush_ack(now());
    if (ours_acked && !said_closing_ && !owed_ack_ && !receiver_.acks_owed()) {
      said_closing_ = send_control(
          control_frame(wire::ack_fields{receiver_.last_seq_seen(), /*closing=*/true}));
    }
  }
  // Kept over a lost connection: the peer closing after reading ours is what usually drops it.
  // A cut that took our closing ack with it leaves the peer to its reconnect deadline; the
  // other way round (waiting for a reconnect here) would cost that deadline on every end.
  return ours_acked && said_closing_ && peer_closing_;
}

bool peer_link::idle() const noexcept {
  return !timer_op_.in_flight();
}

// ------------------------------------------------------------------------------------- counters

peer_link_stats peer_link::stats() const {
  peer_link_stats s = stats_;
  const auto& tx = sender_.stats();
  const auto& rx = receiver_.stats();
  const auto& lv = liveness_.stats();
  s.frames_sent = tx.frames_sent;
  s.bytes_sent = tx.bytes_sent;
  s.retransmits = tx.retransmits;
  s.credit_stalls = tx.credit_stalls;
  s.frames_received = rx.frames_received;
  s.bytes_received = rx.bytes_received;
  s.duplicates = rx.duplicates_dropped;
  s.received_in_place = in_place_before_reset_ + reassembler_.counters().in_place;
  s.heartbeats_sent = lv.heartbeats_sent;
  s.heartbeats_received = lv.heartbeats_received;
  s.srtt = lv.srtt;
  s.last_rtt = lv.last_rtt;
  s.held_bytes = delivered_unreleased_;
  s.buffered_bytes = sender_.buffered_bytes();
  return s;
}

}  // namespace vessel::actors
