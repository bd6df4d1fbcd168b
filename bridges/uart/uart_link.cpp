#include "bridges/uart/uart_link.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>

#include "bridges/uart/errc.hpp"
#include "io/errc.hpp"
#include "io/log.hpp"

namespace vessel::bridges::uart {
namespace {

reliable_channel_config channel_config(const uart_link_config& c) {
  reliable_channel_config cc = c.channel;
  cc.baud = c.serial.baud;
  cc.bits_per_char = c.serial.bits_per_char();
  return cc;
}

// Deadlines are checked on a tick while anything is in flight, not on a timer per call: the
// reactor's timer queue allocates per timer, and a tick costs one timer per period whatever the
// message rate. An eighth of the smallest retransmit timeout keeps retransmits within 12.5% of
// their due time (115200 baud: 25 ms; a pty test at 4 Mbaud with a 1 ms floor: 1 ms).
std::chrono::nanoseconds tick_of(const reliable_channel& ch) {
  const auto t = ch.rto(link_ack_frame_bytes) / 8;
  return std::max<std::chrono::nanoseconds>(t, std::chrono::milliseconds{1});
}

}  // namespace

std::string uart_link_config::to_string() const {
  std::ostringstream s;
  s << serial.to_string() << " reliable=" << reliable << " window=" << channel.window
    << " peer_window=" << channel.peer_window
    << " rto_floor_us=" << std::chrono::duration_cast<std::chrono::microseconds>(channel.rto_floor).count()
    << " fast_retransmit=" << channel.fast_retransmit << " max_calls=" << max_calls
    << " retry_in_flight=" << retry_in_flight;
  return s.str();
}

uart_link::uart_link(io::reactor& r, uart_link_config config)
    : reactor_(r),
      config_(std::move(config)),
      channel_(channel_config(config_), *this),
      slots_(config_.max_calls),
      scratch_(config_.max_calls),
      backoff_(config_.reopen) {
  tick_ = tick_of(channel_);
  subscribers_.reserve(4);
}

result<std::unique_ptr<uart_link>> uart_link::open(io::reactor& r, uart_link_config config) {
  if (config.max_calls == 0 || config.max_calls > 32768 || config.channel.window < 1 ||
      config.channel.window > link_max_window) {
    return std::make_error_code(std::errc::invalid_argument);
  }
  VESSEL_TRY(config.serial.validate());
  std::unique_ptr<uart_link> link{new uart_link(r, std::move(config))};
  auto t = io::serial_transport::open(r, link->config_.serial, *link, link->config_.transport);
  if (!t) return t.error();
  link->transport_ = std::move(t).value();
  link->session_ = link->config_.session.value_or(
      static_cast<std::uint8_t>(std::random_device{}() & 0xFF));
  link->channel_.start(link->session_, clock::now());
  link->arm_tick();
  vessel::log::get("bridges").info("uart link open {}", link->config_.to_string());
  return link;
}

uart_link::~uart_link() {
  if (tick_timer_ != 0) reactor_.cancel_timer(tick_timer_);
  if (reopen_timer_ != 0) reactor_.cancel_timer(reopen_timer_);
}

// -- Calls ------------------------------------------------------------------------------------

result<std::uint32_t> uart_link::take_slot(std::uint8_t command, std::span<const std::byte> body,
                                           bool expects_reply) {
  if (state_ == link_state::closed || closing_) return errc::link_closed;
  if ((command & reply_flag) != 0) return errc::bad_command;
  if (body.size() > max_request_body) return errc::message_too_large;
  if (pending_ == slots_.size()) return errc::too_many_calls;
  // Request ids count up (never 0); a call lives in slot id % max_calls, so a reply finds its call
  // in O(1) and a late reply to a reused slot is told apart by the id kept in it.
  const auto n = static_cast<std::uint32_t>(slots_.size());
  for (std::uint32_t tries = 0; tries < 65536; ++tries) {
    const std::uint16_t id = next_id_;
    next_id_ = static_cast<std::uint16_t>(next_id_ + 1 == 0 ? 1 : next_id_ + 1);
    const std::uint32_t idx = id % n;
    call_slot& s = slots_[idx];
    if (s.in_use) continue;
    const auto len = encode_request(command, expects_reply ? id : 0, body, s.message);
    if (!len) return len.error();
    s.id = id;
    s.in_use = true;
    s.expects_reply = expects_reply;
    s.sent = false;
    s.len = static_cast<std::uint8_t>(len.value());
    s.order = next_order_++;
    ++pending_;
    return idx;
  }
  return errc::too_many_calls;  // unreachable: a free slot exists, and ids cycle through them all
}

result<std::uint16_t> uart_link::call(std::uint8_t command, std::span<const std::byte> body,
                                      clock::duration timeout, reply_handler on_reply) {
  VESSEL_TRY(idx, take_slot(command, body, true));
  call_slot& s = slots_[idx];
  s.deadline = clock::now() + timeout;
  s.handler = std::move(on_reply);
  ++own_.calls;
  push_waiting(idx);
  flush_waiting();
  arm_tick();
  return s.id;
}

result<void> uart_link::send(std::uint8_t command, std::span<const std::byte> body) {
  VESSEL_TRY(idx, take_slot(command, body, false));
  slots_[idx].deadline = clock::time_point::max();
  push_waiting(idx);
  flush_waiting();
  arm_tick();
  return outcome::success();
}

void uart_link::free_slot(std::uint32_t idx) noexcept {
  call_slot& s = slots_[idx];
  unlink_waiting(idx);
  s.in_use = false;
  s.id = 0;
  s.handler = nullptr;
  --pending_;
}

void uart_link::push_waiting(std::uint32_t idx) noexcept {
  call_slot& s = slots_[idx];
  s.prev = wait_tail_;
  s.next = none;
  if (wait_tail_ != none) {
    slots_[wait_tail_].next = idx;
  } else {
    wait_head_ = idx;
  }
  wait_tail_ = idx;
}

void uart_link::unlink_waiting(std::uint32_t idx) noexcept {
  call_slot& s = slots_[idx];
  if (s.prev == none && s.next == none && wait_head_ != idx) return;  // not in the list
  if (s.prev != none) slots_[s.prev].next = s.next; else wait_head_ = s.next;
  if (s.next != none) slots_[s.next].prev = s.prev; else wait_tail_ = s.prev;
  s.prev = s.next = none;
}

void uart_link::flush_waiting() {
  if (state_ != link_state::up || !transport_->is_open()) return;
  const std::size_t cap = config_.transport.send_queue_bytes;
  while (wait_head_ != none) {
    const std::uint32_t idx = wait_head_;
    call_slot& s = slots_[idx];
    // Room on the line for the frame and a few acks; otherwise on_writable() calls again.
    if (cap - transport_->queued_bytes() < wire::serial_frame_size(s.len + link_header_bytes) + 16) {
      break;
    }
    const std::span<const std::byte> msg{s.message.data(), s.len};
    if (config_.reliable) {
      if (channel_.send_room() == 0) break;  // the next ack makes room
      if (!channel_.send(msg, clock::now())) break;
    } else if (!channel_.send_unreliable(msg)) {
      break;
    }
    unlink_waiting(idx);
    if (s.sent) ++own_.calls_resent;
    s.sent = true;
    if (!s.expects_reply) {
      ++own_.sends;
      free_slot(idx);  // in the window now (reliable) or on the line: nothing more to wait for
    }
  }
}

void uart_link::complete(std::uint32_t idx, result<std::span<const std::byte>> outcome) {
  // Free first: the handler may call again, and may reuse this very slot.
  reply_handler h = std::move(slots_[idx].handler);
  free_slot(idx);
  if (h) h(outcome);
}

void uart_link::fail_all(std::error_code why) {
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].in_use) continue;
    if (slots_[i].expects_reply) {
      ++own_.calls_failed;
      complete(i, why);
    } else {
      free_slot(i);
    }
  }
}

// -- Line -------------------------------------------------------------------------------------

void uart_link::on_serial_frame(std::span<const std::byte> payload) {
  channel_.on_link_payload(payload, clock::now());
  // An ack may have opened the window.
  if (wait_head_ != none) flush_waiting();
}

void uart_link::on_writable() { flush_waiting(); }

void uart_link::write_link_payload(std::span<const std::byte> payload) {
  if (!transport_ || !transport_->is_open()) return;
  if (!transport_->send_frame(payload)) ++own_.frames_dropped;  // DATA is resent on timeout
}

void uart_link::deliver(std::span<const std::byte> message, bool /*reliable*/) {
  const auto m = parse_message(message);
  if (!m || m->what == board_message::kind::request) {
    ++own_.malformed;
    return;
  }
  if (m->what == board_message::kind::event) {
    ++own_.events;
    for (std::size_t i = 0; i < subscribers_.size(); ++i) {
      if (subscribers_[i].second) subscribers_[i].second(m->command, m->body);
    }
    return;
  }
  const std::uint32_t idx = m->request_id % static_cast<std::uint32_t>(slots_.size());
  call_slot& s = slots_[idx];
  if (!s.in_use || !s.expects_reply || s.id != m->request_id) {
    ++own_.late_replies;  // its call timed out (or, across a reopen, was answered before)
    return;
  }
  ++own_.replies;
  if (const auto err = status_error(m->status)) {
    complete(idx, err);
  } else {
    complete(idx, m->body);
  }
}

// -- Time -------------------------------------------------------------------------------------

void uart_link::arm_tick() {
  if (tick_timer_ != 0 || state_ == link_state::closed) return;
  if (pending_ == 0 && channel_.in_flight() == 0) return;
  tick_timer_ = reactor_.add_timer(tick_, [this] { on_tick(); });
}

void uart_link::on_tick() {
  tick_timer_ = 0;
  const auto now = clock::now();
  if (state_ == link_state::up) channel_.poll(now);
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    call_slot& s = slots_[i];
    if (!s.in_use || !s.expects_reply || s.deadline > now) continue;
    // While the device is away the clearer reason is that it is away.
    if (state_ == link_state::down) {
      ++own_.calls_failed;
      complete(i, errc::device_unplugged);
    } else {
      ++own_.call_timeouts;
      complete(i, errc::call_timeout);
    }
  }
  if (state_ == link_state::up && wait_head_ != none) flush_waiting();
  arm_tick();
}

// -- Unplug and reopen ------------------------------------------------------------------------

void uart_link::on_closed(std::error_code why) {
  if (closing_ || why == io::errc::transport_closed) {
    become_closed(errc::link_closed);
    return;
  }
  // The device went away (or the line failed): report, keep or fail the calls, reopen later.
  ++own_.unplugs;
  state_ = link_state::down;
  vessel::log::get("bridges").warn("uart link down ({}): {}", why.message(), config_.serial.path);
  if (config_.retry_in_flight) {
    // Calls already on the line go out again first, in the order they were made.
    auto* sent = scratch_.data();
    std::uint32_t n = 0;
    for (std::uint32_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].in_use && slots_[i].sent) sent[n++] = i;
    }
    std::sort(sent, sent + n, [&](std::uint32_t a, std::uint32_t b) {
      return slots_[a].order > slots_[b].order;
    });
    for (std::uint32_t k = 0; k < n; ++k) {  // newest first, each to the head of the list
      const std::uint32_t idx = sent[k];
      call_slot& s = slots_[idx];
      s.prev = none;
      s.next = wait_head_;
      if (wait_head_ != none) slots_[wait_head_].prev = idx; else wait_tail_ = idx;
      wait_head_ = idx;
    }
  } else {
    for (std::uint32_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].in_use && slots_[i].expects_reply) {
        ++own_.calls_failed;
        complete(i, errc::device_unplugged);
      } else if (slots_[i].in_use) {
        free_slot(i);
      }
    }
  }
  notify(link_state::down, why);
  if (state_ == link_state::down) schedule_reopen();
}

void uart_link::schedule_reopen() {
  const auto delay = backoff_.next();
  if (!delay) {
    vessel::log::get("bridges").error("uart device gone for good: {}", config_.serial.path);
    fail_all(errc::device_gone);
    become_closed(errc::device_gone);
    return;
  }
  reopen_timer_ = reactor_.add_timer(*delay, [this] {
    reopen_timer_ = 0;
    try_reopen();
  });
}

void uart_link::try_reopen() {
  if (state_ != link_state::down || closing_) return;
  if (const auto r = transport_->reopen(); !r) {
    vessel::log::get("bridges").debug("uart reopen {}: {}", config_.serial.path, r.error().message());
    schedule_reopen();  // ENOENT while the device is away, EBUSY while someone else holds it
    return;
  }
  backoff_.reset();
  ++own_.reopens;
  state_ = link_state::up;
  // A new run of this side: a new session, so the board takes our SYN as a new stream.
  channel_.start(++session_, clock::now());
  vessel::log::get("bridges").info("uart link up again: {}", config_.serial.path);
  notify(link_state::up, {});
  flush_waiting();
  arm_tick();
}

void uart_link::close() {
  if (closing_ || state_ == link_state::closed) return;
  closing_ = true;
  if (reopen_timer_ != 0) {
    reactor_.cancel_timer(reopen_timer_);
    reopen_timer_ = 0;
  }
  fail_all(errc::link_closed);
  if (transport_->is_open()) {
    transport_->close();  // on_closed follows once its operations are done
  } else {
    become_closed(errc::link_closed);
  }
}

void uart_link::become_closed(std::error_code why) {
  if (state_ == link_state::closed) return;
  state_ = link_state::closed;
  if (tick_timer_ != 0) {
    reactor_.cancel_timer(tick_timer_);
    tick_timer_ = 0;
  }
  if (reopen_timer_ != 0) {
    reactor_.cancel_timer(reopen_timer_);
    reopen_timer_ = 0;
  }
  fail_all(why);
  notify(link_state::closed, why);
}

void uart_link::notify(link_state s, std::error_code why) {
  if (state_handler_) state_handler_(s, why);
}

// -- Events and counters ----------------------------------------------------------------------

std::uint64_t uart_link::subscribe(event_handler on_event) {
  const auto id = next_subscriber_++;
  subscribers_.emplace_back(id, std::move(on_event));
  return id;
}

void uart_link::unsubscribe(std::uint64_t id) noexcept {
  // Cleared, not erased: an event handler may unsubscribe while the list is being walked.
  for (auto& [sid, h] : subscribers_) {
    if (sid == id) h = nullptr;
  }
}

uart_link_counters uart_link::counters() const noexcept {
  uart_link_counters c = own_;
  const auto t = transport_->stats();
  c.frames_in = t.frames_received;
  c.frames_out = t.frames_queued;
  c.bytes_in = t.bytes_received;
  c.bytes_out = t.bytes_sent;
  c.crc_errors = t.crc_errors;
  c.bad_length = t.bad_length;
  c.truncated = t.truncated;
  c.resync_bytes = t.resync_bytes;
  const auto& ch = channel_.stats();
  c.retransmits = ch.retransmitted_frames;
  c.rto_timeouts = ch.timeouts;
  c.fast_retransmits = ch.fast_retransmits;
  c.duplicates = ch.duplicates;
  c.out_of_order = ch.out_of_order;
  c.bad_check = ch.bad_check;
  c.bad_header = ch.bad_header;
  return c;
}

}  // namespace vessel::bridges::uart
