#include "bridges/uart/reliable_channel.hpp"

#include <cstring>
#include <stdexcept>

#include "bridges/uart/errc.hpp"

namespace vessel::bridges::uart {
namespace {

constexpr unsigned seq_mask = link_seq_mod - 1;
constexpr unsigned half_circle = link_seq_mod / 2;

}  // namespace

reliable_channel::reliable_channel(reliable_channel_config config, channel_sink& sink)
    : config_(config), sink_(sink) {
  if (config_.window < 1 || config_.window > link_max_window) {
    throw std::invalid_argument("reliable_channel: window must be 1..8");
  }
  if (config_.baud == 0) throw std::invalid_argument("reliable_channel: baud must be > 0");
  if (config_.bits_per_char == 0) config_.bits_per_char = wire::bits_per_char_8n1;
}

std::chrono::nanoseconds reliable_channel::rto(std::size_t frame_bytes) const noexcept {
  return retransmit_timeout(config_.baud, config_.bits_per_char, frame_bytes, config_.peer_window,
                            config_.rto_floor);
}

std::chrono::nanoseconds reliable_channel::rto_of_oldest() const noexcept {
  return rto(wire::serial_frame_size(slots_[first_].len));
}

void reliable_channel::start(std::uint8_t session, clock::time_point now) {
  started_ = true;
  first_ = count_ = base_ = next_ = 0;
  fast_resent_ = syn_acked_ = resync_pending_ = false;
  rx_synced_ = false;
  rx_expected_ = 0;
  session_ = session;
  // The SYN occupies seq 0 and is windowed like DATA; the first DATA is seq 1.
  const std::byte body[1] = {std::byte{session}};
  (void)send_windowed(link_type::syn, body, now);
}

result<void> reliable_channel::send(std::span<const std::byte> message, clock::time_point now) {
  VESSEL_TRY(send_windowed(link_type::data, message, now));
  ++stats_.sent_reliable;
  return outcome::success();
}

result<void> reliable_channel::send_windowed(link_type type, std::span<const std::byte> body,
                                             clock::time_point now) {
  if (!started_) return errc::not_started;
  if (body.size() > link_max_message) return errc::message_too_large;
  if (count_ >= config_.window) return errc::window_full;
  slot& s = slot_at(count_);
  const std::uint8_t h = link_header(type, next_);
  s.bytes[0] = std::byte{h};
  s.bytes[1] = std::byte{link_check(h, body)};
  if (!body.empty()) std::memcpy(s.bytes.data() + link_header_bytes, body.data(), body.size());
  s.len = static_cast<std::uint16_t>(body.size() + link_header_bytes);
  next_ = (next_ + 1) & seq_mask;
  if (count_++ == 0) {
    rto_deadline_ = now + rto(wire::serial_frame_size(s.len));
    fast_resent_ = false;
  }
  sink_.write_link_payload({s.bytes.data(), s.len});
  return outcome::success();
}

result<void> reliable_channel::send_unreliable(std::span<const std::byte> message) {
  if (message.size() > link_max_message) return errc::message_too_large;
  std::array<std::byte, wire::serial_max_payload> p;
  const std::uint8_t h = link_header(link_type::unreliable, 0);
  p[0] = std::byte{h};
  p[1] = std::byte{link_check(h, message)};
  if (!message.empty()) std::memcpy(p.data() + link_header_bytes, message.data(), message.size());
  sink_.write_link_payload({p.data(), message.size() + link_header_bytes});
  ++stats_.sent_unreliable;
  return outcome::success();
}

void reliable_channel::send_control(link_type type, unsigned seq, std::span<const std::byte> body) {
  std::array<std::byte, link_header_bytes + 1> p;
  const std::uint8_t h = link_header(type, seq);
  p[0] = std::byte{h};
  p[1] = std::byte{link_check(h, body)};
  if (!body.empty()) p[2] = body[0];
  sink_.write_link_payload({p.data(), link_header_bytes + body.size()});
}

void reliable_channel::send_ack() {
  send_control(link_type::ack, rx_expected_, {});
  ++stats_.acks_sent;
}

void reliable_channel::resend_window() {
  // A SYN answering a SYN request goes first, outside the window: seq base - 1, so that a
  // receiver without state expects base, the oldest frame resent right after it.
  if (resync_pending_) {
    const std::byte body[1] = {std::byte{session_}};
    send_control(link_type::syn, (base_ - 1) & seq_mask, body);
  }
  for (unsigned i = 0; i < count_; ++i) {
    const slot& s = slot_at(i);
    sink_.write_link_payload({s.bytes.data(), s.len});
    ++stats_.retransmitted_frames;
  }
}

void reliable_channel::on_ack(unsigned next, clock::time_point now) {
  const unsigned acked = (next - base_) & seq_mask;
  if (acked > count_) {
    ++stats_.bad_header;  // acks a frame never sent: a stale ack of an earlier session
    return;
  }
  resync_pending_ = false;  // any ack in range comes from a synced receiver
  if (acked == 0) {
    // Nothing new. With frames in flight the receiver saw a gap: the oldest frame was lost.
    if (count_ != 0 && config_.fast_retransmit && !fast_resent_ && syn_acked_) {
      fast_resent_ = true;
      ++stats_.fast_retransmits;
      resend_window();
      rto_deadline_ = now + rto_of_oldest();
    }
    return;
  }
  syn_acked_ = true;  // the oldest frame, so the SYN of start() first
  first_ = (first_ + acked) % config_.window;
  count_ -= acked;
  base_ = next & seq_mask;
  fast_resent_ = false;
  // The new oldest frame gets a full timeout from here: it may have waited behind those acked.
  if (count_ != 0) rto_deadline_ = now + rto_of_oldest();
}

void reliable_channel::on_link_payload(std::span<const std::byte> p, clock::time_point now) {
  if (!started_) return;
  if (p.size() < link_header_bytes) {
    ++stats_.bad_header;
    return;
  }
  const auto h = static_cast<std::uint8_t>(p[0]);
  const auto body = p.subspan(link_header_bytes);
  if (link_check(h, body) != static_cast<std::uint8_t>(p[1])) {
    ++stats_.bad_check;
    return;
  }
  const unsigned seq = link_seq_of(h);
  switch (link_type_of(h)) {
    case link_type::unreliable:
      ++stats_.delivered_unreliable;
      sink_.deliver(body, false);
      return;
    case link_type::ack:
      on_ack(seq, now);
      return;
    case link_type::syn:
      if (body.empty()) {
        // The peer's receiver has no state: tell it where our stream stands. While our first SYN
        // is unacked it is being resent anyway, and says the same.
        if (syn_acked_) {
          ++stats_.syn_requests;
          resync_pending_ = true;
          const std::byte s[1] = {std::byte{session_}};
          send_control(link_type::syn, (base_ - 1) & seq_mask, s);
        }
        return;
      }
      if (body.size() != 1) {
        ++stats_.bad_header;
        return;
      }
      if (!rx_synced_ || static_cast<std::uint8_t>(body[0]) != rx_session_) {
        rx_synced_ = true;  // a new stream of the peer: first contact, or the peer restarted
        rx_session_ = static_cast<std::uint8_t>(body[0]);
        rx_expected_ = (seq + 1) & seq_mask;
      } else {
        ++stats_.duplicates;  // our ack of it was lost
      }
      send_ack();
      return;
    case link_type::data:
      break;
  }
  if (!rx_synced_) {
    ++stats_.unsynced_drops;  // its SYN was lost (it comes again first), or we restarted
    send_control(link_type::syn, 0, {});
    return;
  }
  const unsigned ahead = (seq - rx_expected_) & seq_mask;
  if (ahead == 0) {
    rx_expected_ = (rx_expected_ + 1) & seq_mask;
    send_ack();  // before delivering: what the callee sends in reply then follows it
    ++stats_.delivered_reliable;
    sink_.deliver(body, true);
    return;
  }
  if (ahead >= half_circle) {
    ++stats_.duplicates;
  } else {
    ++stats_.out_of_order;
  }
  send_ack();
}

void reliable_channel::poll(clock::time_point now) {
  if (count_ == 0 || now < rto_deadline_) return;
  ++stats_.timeouts;
  resend_window();
  rto_deadline_ = now + rto_of_oldest();
}

std::optional<reliable_channel::clock::time_point> reliable_channel::retransmit_deadline()
    const noexcept {
  if (count_ == 0) return std::nullopt;
  return rto_deadline_;
}

}  // namespace vessel::bridges::uart
