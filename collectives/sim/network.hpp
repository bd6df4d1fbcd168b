#pragma once
// An in-process, discrete-event simulated network that runs one algorithm instance per rank
// (collectives/algorithms/algorithm.hpp) deterministically, with modelled time and faults.
//
// The model, per directed link src -> dst (full duplex: dst -> src is another link):
// - A message of n bytes occupies the link for n * beta (transmission) and arrives alpha after
//   its last byte left: on an idle link it takes alpha + n * beta. Transmissions on one link are
//   serialised (a message waits until the link is free); latency overlaps, so back-to-back
//   chunks pipeline. A rank may transmit on several links at once (no NIC limit) unless
//   network_config::one_port serialises all of a rank's transmissions; reductions cost no
//   modelled time.
// - Delivery is FIFO per link, as the real link layer guarantees.
// - drop_link: the link carries nothing in [from, until). The link layer is reliable, so a
//   message whose transmission or flight overlaps the outage is sent again once the link is
//   back: it is delayed, never lost.
// - delay_link: messages emitted in [from, until) take `extra` seconds longer.
// - kill_rank: from `at` on the rank processes nothing and sends nothing; messages to it are
//   discarded. Its peers stall, and the report says who waits for whom.
// - Seeded randomness: per-message jitter and per-rank start skew, both uniform, from one
//   seed; the same seed gives the same run, event for event.
// Events are processed in (time, emission order); each costs O(log events), so 256 ranks run in
// milliseconds. Everything runs on the calling thread.

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "collectives/algorithms/algorithm.hpp"

namespace vessel::collectives::sim {

/// Per-link latency and inverse bandwidth. The defaults are Open MPI over loopback TCP on these
/// machines (notes/PEERS.md): 8-byte ping-pong half round trip 10.7 us; 2.7 GB/s streaming.
struct link_model {
  double alpha_s = 10.7e-6;
  double beta_s_per_byte = 1.0 / 2.7e9;
};

struct network_config {
  std::uint32_t ranks = 1;
  link_model link{};
  std::uint64_t seed = 1;
  double jitter_s = 0;      ///< each message takes up to this much longer (uniform)
  double start_skew_s = 0;  ///< each rank starts up to this much late (uniform)
  /// One port per rank: a rank transmits one message at a time over all its links together (a
  /// single NIC or one loopback socket set on a busy core), instead of one per link.
  bool one_port = false;
};

/// What one rank was doing when the run ended.
struct rank_report {
  std::uint32_t rank = 0;
  bool done = false;
  bool killed = false;
  double killed_at_s = 0;                ///< when it was killed (if killed)
  double done_s = 0;                     ///< when its algorithm finished (if done)
  std::uint32_t round = 0;               ///< the algorithm's round (if not done)
  std::vector<std::uint32_t> waits_for;  ///< peers it needs chunks from (if not done)
  std::size_t kept_chunks = 0;           ///< chunks held for a later round (if not done)
};

struct run_report {
  enum class outcome : std::uint8_t {
    completed,  ///< every rank not killed finished
    blocked,    ///< nothing left in flight, yet some live ranks have not finished
    failed,     ///< an algorithm returned an error (error, failed_rank)
  };
  outcome status = outcome::completed;
  std::error_code error;
  std::uint32_t failed_rank = 0;
  double completion_s = 0;         ///< when the last rank that finished did
  std::uint64_t messages = 0;      ///< sent by every rank
  std::uint64_t bytes = 0;         ///< payload bytes sent by every rank
  std::uint64_t discarded = 0;     ///< messages that reached a killed rank
  std::uint64_t resent = 0;        ///< messages sent again after a link outage
  std::vector<rank_report> ranks;  ///< one per rank

  bool completed() const noexcept { return status == outcome::completed; }
  /// Live ranks that did not finish.
  std::vector<std::uint32_t> blocked_ranks() const;
  /// The killed ranks that blocked ranks wait for, directly or through other blocked ranks.
  std::vector<std::uint32_t> root_causes() const;
  /// A readable account: outcome, counts, then one line per unfinished rank
  /// ("rank 5 in round 3 waits for rank 4 (killed at 12 us)").
  std::string explain() const;
};

class network {
 public:
  explicit network(network_config config);

  /// The directed link src -> dst is down in [from_s, until_s).
  void drop_link(std::uint32_t src, std::uint32_t dst, double from_s, double until_s);
  /// Messages emitted on src -> dst in [from_s, until_s) take extra_s longer.
  void delay_link(std::uint32_t src, std::uint32_t dst, double extra_s, double from_s = 0,
                  double until_s = std::numeric_limits<double>::infinity());
  /// The rank stops at at_s (0: it never starts).
  void kill_rank(std::uint32_t rank, double at_s);

  /// Runs algorithms[r] on buffers[r] as rank r until every live rank is done or nothing is in
  /// flight. Both spans hold config.ranks entries (otherwise: failed, invalid_argument). The
  /// algorithms must be fresh (not started); the faults apply to this run.
  run_report run(std::span<algorithm* const> algorithms,
                 std::span<const algorithm_buffers> buffers);

  const network_config& config() const noexcept { return config_; }

 private:
  struct fault {
    double from_s;
    double until_s;
    double extra_s;  ///< 0 for a drop
    bool drop;
  };

  std::uint64_t link_key(std::uint32_t src, std::uint32_t dst) const noexcept {
    return std::uint64_t{src} * config_.ranks + dst;
  }

  network_config config_;
  std::unordered_map<std::uint64_t, std::vector<fault>> faults_;
  std::vector<double> kill_at_;  ///< +inf when the rank is never killed
};

}  // namespace vessel::collectives::sim
