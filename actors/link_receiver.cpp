#include "actors/link_receiver.hpp"

#include <stdexcept>

#include "actors/errc.hpp"
#include "actors/link_credit.hpp"

namespace vessel::actors {

link_receiver::link_receiver(const link_receiver_config& config)
    : config_{config}, allowance_{config.window_bytes} {
  if (config.window_bytes == 0 || config.ack_every_frames == 0) {
    throw std::invalid_argument{"link_receiver: window_bytes and ack_every_frames must be > 0"};
  }
}

result<receive_verdict> link_receiver::on_frame(const wire::frame_header& header, link_time now) {
  const wire::frame_kind kind = header.kind();
  if (header.seq == 0 || (kind != wire::frame_kind::data && kind != wire::frame_kind::collective &&
                          kind != wire::frame_kind::device)) {
    return errc::link_not_reliable;
  }
  if (header.seq > last_seq_ + 1) return errc::link_sequence_gap;
  const std::uint64_t len = header.payload_len;
  const std::uint64_t cost = frame_credit(header, config_.message_overhead);
  // Duplicates were charged to the sender's credit too, so they count against it here.
  if (cost > allowance_) return errc::link_credit_exceeded;
  allowance_ -= cost;

  // A frame not yet acked starts the delay clock; a duplicate too, since it means the peer has
  // not heard of our having it and is holding it in its window.
  if (unacked_frames_ == 0) first_unacked_at_ = now;
  ++unacked_frames_;
  unacked_bytes_ += len;

  if (header.seq <= last_seq_) {
    // Dropped at once: its bytes are free again and go back with the next grant.
    consumed_ungranted_ += cost;
    ++stats_.duplicates_dropped;
    return receive_verdict::duplicate;
  }
  last_seq_ = header.seq;
  held_ += cost;
  ++stats_.frames_received;
  stats_.bytes_received += len;
  return receive_verdict::deliver;
}

std::optional<wire::ack_fields> link_receiver::poll_ack(link_time now) noexcept {
  if (unacked_frames_ == 0) return std::nullopt;
  const bool due = ack_soon_ || unacked_frames_ >= config_.ack_every_frames ||
                   unacked_bytes_ >= config_.ack_every_bytes ||
                   now - first_unacked_at_ >= config_.ack_delay;
  if (!due) return std::nullopt;
  ack_soon_ = false;
  unacked_frames_ = 0;
  unacked_bytes_ = 0;
  ++stats_.acks_sent;
  return wire::ack_fields{last_seq_};
}

std::optional<link_time> link_receiver::ack_deadline() const noexcept {
  if (unacked_frames_ == 0) return std::nullopt;
  return first_unacked_at_ + config_.ack_delay;
}

result<std::optional<wire::credit_fields>> link_receiver::on_consumed(std::uint64_t bytes) {
  if (bytes > held_) return errc::link_consumed_beyond_received;
  held_ -= bytes;
  consumed_ungranted_ += bytes;
  if (consumed_ungranted_ < config_.window_bytes / 2) return std::optional<wire::credit_fields>{};
  const std::uint64_t grant = consumed_ungranted_;
  consumed_ungranted_ = 0;
  allowance_ += grant;
  ++stats_.credits_granted;
  stats_.bytes_granted += grant;
  return std::optional<wire::credit_fields>{wire::credit_fields{grant}};
}

wire::credit_fields link_receiver::on_reconnect() noexcept {
  ack_soon_ = false;
  unacked_frames_ = 0;
  unacked_bytes_ = 0;
  consumed_ungranted_ = 0;
  // Frames in flight on the dead connection never arrive, so the window is the app's to hold.
  allowance_ = config_.window_bytes - held_;
  ++stats_.credits_granted;
  stats_.bytes_granted += allowance_;
  return wire::credit_fields{allowance_};
}

}  // namespace vessel::actors
