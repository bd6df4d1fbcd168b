#include "actors/link_liveness.hpp"

#include <algorithm>
#include <stdexcept>

#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

/// A heartbeat time on the wire. Never 0: echo 0 marks a probe, so a probe sent at time 0
/// would come back looking like another probe and be answered forever.
std::uint64_t wire_time(link_time now) noexcept {
  return std::max<std::uint64_t>(static_cast<std::uint64_t>(now.count()), 1);
}

}  // namespace

link_liveness::link_liveness(const link_liveness_config& config, link_time now)
    : config_{config}, last_sent_{now}, last_received_{now} {
  if (config.heartbeat_interval <= link_time::zero() || config.peer_deadline <= link_time::zero()) {
    throw std::invalid_argument{"link_liveness: heartbeat_interval and peer_deadline must be > 0"};
  }
}

void link_liveness::on_sent(link_time now) noexcept { last_sent_ = std::max(last_sent_, now); }

void link_liveness::on_received(link_time now) noexcept {
  last_received_ = std::max(last_received_, now);
}

std::optional<wire::heartbeat_fields> link_liveness::on_heartbeat(const wire::heartbeat_fields& hb,
                                                                  link_time now) noexcept {
  ++stats_.heartbeats_received;
  if (hb.echo_time_ns == 0) {
    ++stats_.heartbeats_sent;
    on_sent(now);
    return wire::heartbeat_fields{wire_time(now), hb.send_time_ns};
  }
  // Only the answer to our latest probe: an older one (its probe superseded) or a forged echo
  // from the future would give a wrong sample.
  if (hb.echo_time_ns == outstanding_probe_ns_ && hb.echo_time_ns <= wire_time(now)) {
    outstanding_probe_ns_ = 0;
    take_sample(link_time{static_cast<std::int64_t>(wire_time(now) - hb.echo_time_ns)});
  }
  return std::nullopt;
}

std::optional<wire::heartbeat_fields> link_liveness::on_idle_tick(link_time now) noexcept {
  if (now - last_sent_ < config_.heartbeat_interval) return std::nullopt;
  ++stats_.heartbeats_sent;
  last_sent_ = now;
  outstanding_probe_ns_ = wire_time(now);
  return wire::heartbeat_fields{outstanding_probe_ns_, 0};
}

bool link_liveness::peer_silent(link_time now) const noexcept {
  return now - last_received_ > config_.peer_deadline;
}

std::error_code link_liveness::check_peer(link_time now) const noexcept {
  return peer_silent(now) ? make_error_code(errc::link_peer_silent) : std::error_code{};
}

void link_liveness::take_sample(link_time sample) noexcept {
  ++stats_.rtt_samples;
  stats_.last_rtt = sample;
  if (stats_.rtt_samples == 1) {
    // RFC 6298 2.2: the first sample sets srtt and half of it the variation.
    stats_.srtt = sample;
    stats_.rttvar = sample / 2;
    return;
  }
  const link_time err = sample - stats_.srtt;
  const link_time abs_err = err < link_time::zero() ? -err : err;
  stats_.rttvar += (abs_err - stats_.rttvar) / 4;  // beta = 1/4
  stats_.srtt += err / 8;                          // alpha = 1/8
}

}  // namespace vessel::actors
