#pragma once
// Heartbeats, silence detection and the RTT estimate of one link, as a pure state machine: time
// is passed in, frames are returned for the owner to send.
//
// Heartbeat protocol (wire::heartbeat_fields): an idle side sends a probe {send_time, echo 0};
// the peer answers at once with {its time, echo = the probe's send_time}; an answer is never
// answered. The prober takes now - echo as an RTT sample: only its own clock is involved, so the
// peers' clocks need not agree. Answering at once (not on the next idle tick) keeps the sample
// free of the peer's heartbeat interval.

#include <chrono>
#include <cstdint>
#include <optional>
#include <system_error>

#include "actors/link_receiver.hpp"
#include "wire/frame_header.hpp"

namespace vessel::actors {

/// Liveness policy of one link.
struct link_liveness_config {
  /// Send a probe when nothing was sent for this long.
  link_time heartbeat_interval = std::chrono::seconds{1};
  /// The peer is down when nothing was received for longer than this (several intervals, so
  /// one lost or late heartbeat is not a death).
  link_time peer_deadline = std::chrono::seconds{10};
};

/// Liveness counters and the RTT estimate.
struct link_liveness_stats {
  std::uint64_t heartbeats_sent = 0;      ///< probes and answers
  std::uint64_t heartbeats_received = 0;
  std::uint64_t rtt_samples = 0;
  link_time srtt{};     ///< smoothed RTT (RFC 6298: srtt += (sample - srtt) / 8); 0 before a sample
  link_time rttvar{};   ///< RTT variation (RFC 6298: rttvar += (|sample - srtt| - rttvar) / 4)
  link_time last_rtt{};  ///< the latest sample
};

/// Idle heartbeats, peer-silence deadline and smoothed RTT from echoed heartbeats.
/// Single-threaded: owned by the reactor thread of its connection.
class link_liveness {
 public:
  /// `now` starts both clocks: a link just up counts as having sent and received.
  link_liveness(const link_liveness_config& config, link_time now);

  /// The owner sent a frame (any kind) at `now`.
  void on_sent(link_time now) noexcept;
  /// The owner received a frame (any kind) at `now`.
  void on_received(link_time now) noexcept;

  /// A heartbeat arrived at `now` (call on_received too). Returns the answer to send at once
  /// for a probe; takes an RTT sample for an answer to our latest probe.
  std::optional<wire::heartbeat_fields> on_heartbeat(const wire::heartbeat_fields& hb,
                                                     link_time now) noexcept;

  /// A probe to send when nothing was sent for heartbeat_interval; counts it as sent.
  std::optional<wire::heartbeat_fields> on_idle_tick(link_time now) noexcept;

  /// True when nothing was received for longer than peer_deadline.
  bool peer_silent(link_time now) const noexcept;
  /// errc::link_peer_silent when peer_silent(now), else no error: the reason a monitor is told.
  std::error_code check_peer(link_time now) const noexcept;

  /// When on_idle_tick() or peer_silent() may next change (the owner's next timer).
  link_time next_heartbeat_at() const noexcept { return last_sent_ + config_.heartbeat_interval; }
  link_time silent_at() const noexcept { return last_received_ + config_.peer_deadline; }

  const link_liveness_stats& stats() const noexcept { return stats_; }

 private:
  void take_sample(link_time sample) noexcept;

  link_liveness_config config_;
  link_time last_sent_;
  link_time last_received_;
  std::uint64_t outstanding_probe_ns_ = 0;  ///< send_time of our latest unanswered probe
  link_liveness_stats stats_;
};

}  // namespace vessel::actors
