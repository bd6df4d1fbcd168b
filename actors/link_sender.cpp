#include "actors/link_sender.hpp"

#include <stdexcept>
#include <utility>

#include "actors/errc.hpp"
#include "actors/link_credit.hpp"

namespace vessel::actors {
namespace {

/// Data, collective and device frames carry a seq and are resent after a drop; hello, ack,
/// credit and heartbeat are per-connection control and never are.
bool is_sequenced(wire::frame_kind kind) noexcept {
  return kind == wire::frame_kind::data || kind == wire::frame_kind::collective ||
         kind == wire::frame_kind::device;
}

}  // namespace

link_sender::link_sender(const link_sender_config& config)
    : config_{config}, credit_{config.initial_credit} {
  if (config.max_unacked_frames == 0 || config.max_buffered_bytes == 0) {
    throw std::invalid_argument{
        "link_sender: max_unacked_frames and max_buffered_bytes must be > 0"};
  }
  ring_.resize(config.max_unacked_frames + config.max_queued_frames);
}

result<submit_outcome> link_sender::submit(wire::frame_header header, io::buffer_slice payload,
                                           io::buffer_slice more) {
  if (!is_sequenced(header.kind())) return errc::link_not_reliable;
  const std::size_t len = payload.size() + more.size();
  if (len > config_.max_buffered_bytes) return errc::link_frame_too_large;
  if (!writable(len)) {
    ++stats_.would_block;
    blocked_ = true;
    blocked_bytes_ = len;
    return errc::link_would_block;
  }
  const std::uint64_t seq = next_seq_++;
  header.seq = seq;
  header.payload_len = static_cast<std::uint32_t>(len);
  outgoing_frame& f = slot(seq);
  f.header = std::move(header);
  f.payload = std::move(payload);
  f.more = std::move(more);
  f.credit = frame_credit(f.header, config_.message_overhead);
  buffered_bytes_ += len;
  queued_credit_ += f.credit;

  // Sendable when every frame before it that waits for transmission fits too: frames go out in
  // seq order, so a frame never overtakes one still waiting for credit.
  if (queued_credit_ <= credit_ &&
      queued_frames() + unacked_frames() <= config_.max_unacked_frames) {
    return submit_outcome::sendable;
  }
  if (!stalled_) {
    stalled_ = true;
    ++stats_.credit_stalls;
  }
  return submit_outcome::queued;
}

bool link_sender::can_release(const outgoing_frame& f) const noexcept {
  return f.credit <= credit_ && unacked_frames() < config_.max_unacked_frames;
}

const outgoing_frame* link_sender::next_transmit() noexcept {
  if (next_tx_seq_ == next_seq_) {
    stalled_ = false;
    return nullptr;
  }
  const outgoing_frame& f = slot(next_tx_seq_);
  if (!can_release(f)) {
    if (!stalled_) {
      stalled_ = true;
      ++stats_.credit_stalls;
    }
    return nullptr;
  }
  credit_ -= f.credit;
  queued_credit_ -= f.credit;
  ++stats_.frames_sent;
  stats_.bytes_sent += f.bytes();
  if (next_tx_seq_ <= highest_sent_) {
    ++stats_.retransmits;
  } else {
    highest_sent_ = next_tx_seq_;
  }
  ++next_tx_seq_;
  if (next_tx_seq_ == next_seq_) stalled_ = false;
  return &f;
}

result<std::size_t> link_sender::on_ack(std::uint64_t cumulative_seq) {
  if (cumulative_seq > highest_sent_) return errc::link_ack_beyond_sent;
  if (cumulative_seq <= acked_seq_) return std::size_t{0};
  // An ack may cover frames handed out on the old connection and not yet resent on the new one
  // (the peer got them after all): they leave the queue without a resend.
  std::size_t released = 0;
  while (acked_seq_ < cumulative_seq) {
    outgoing_frame& f = slot(++acked_seq_);
    buffered_bytes_ -= f.bytes();
    if (acked_seq_ >= next_tx_seq_) queued_credit_ -= f.credit;
    f.payload.reset();  // the buffer goes back to its pool now, not when the slot is reused
    f.more.reset();
    ++released;
  }
  if (next_tx_seq_ <= acked_seq_) next_tx_seq_ = acked_seq_ + 1;
  stats_.frames_acked += released;
  if (blocked_ && writable(blocked_bytes_)) {
    blocked_ = false;
    writable_signal_ = true;
  }
  return released;
}

result<void> link_sender::on_credit(std::uint64_t bytes) {
  if (bytes > config_.max_credit || credit_ > config_.max_credit - bytes) {
    return errc::link_credit_overflow;
  }
  credit_ += bytes;
  return outcome::success();
}

result<void> link_sender::resume(std::uint64_t peer_last_seq_seen) {
  if (peer_last_seq_seen > highest_sent_ || peer_last_seq_seen < acked_seq_) {
    return errc::link_resume_out_of_range;
  }
  // The hello's last-seen seq is a cumulative ack; everything after it goes out again.
  if (auto acked = on_ack(peer_last_seq_seen); !acked) return acked.error();
  for (std::uint64_t seq = acked_seq_ + 1; seq < next_tx_seq_; ++seq) {
    queued_credit_ += slot(seq).credit;
  }
  next_tx_seq_ = acked_seq_ + 1;
  credit_ = 0;
  return outcome::success();
}

void link_sender::drop_payloads() noexcept {
  for (outgoing_frame& f : ring_) {
    f.payload.reset();
    f.more.reset();
  }
}

bool link_sender::writable(std::size_t payload_bytes) const noexcept {
  return queued_frames() + unacked_frames() < ring_.size() &&
         payload_bytes <= config_.max_buffered_bytes - buffered_bytes_;
}

bool link_sender::take_writable_signal() noexcept {
  return std::exchange(writable_signal_, false);
}

}  // namespace vessel::actors
