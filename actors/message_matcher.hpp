#pragma once
// MPI matching of arriving messages against posted receives, for one rank. Pure and
// single-threaded (the runtime keeps it on its reactor thread): no I/O, no lock, no clock.
//
// The rules are MPI's (MPI 4.0, section 3.5):
// - a receive names a source (or any_source) and a tag (or any_tag);
// - a posted receive takes the oldest unexpected message that fits, else waits;
// - an arriving message completes the oldest pending receive that fits, else is queued as
//   unexpected;
// - messages from one source with one tag are matched in the order they arrived
//   (non-overtaking), which holds because both queues are scanned oldest first.
//
// The unexpected queue is bounded in bytes and in messages. Credit (the link's flow control) is
// given back for a message when it is matched, or when it is buffered while the queue is under
// its bound. Past the bound the message is still kept (the link already holds its bytes) but its
// credit is withheld, so each sender can push at most one link window more; the credit is
// returned when the message is taken or the queue drains below its low-water mark. Memory is
// thus bounded by max_unexpected_bytes plus one window per source. The bytes bound counts the
// pool blocks the queued messages hold, not their lengths: a size class of the pool holds the
// bound's worth of its own blocks, and counted by length, 256 KiB messages in 1 MiB blocks
// emptied the class at a quarter of the bound (the link then had to reconnect to shed a
// message: a 256 KiB stream over shm fell from 22 to 2 GB/s).
//
// Nodes of both queues come from free lists that grow only when a high-water mark is passed:
// no allocation per message in steady state.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "io/buffer.hpp"
#include "wire/result.hpp"

namespace vessel::actors {

/// Wildcards of a receive.
inline constexpr std::uint32_t any_source = std::numeric_limits<std::uint32_t>::max();
inline constexpr std::uint64_t any_tag = std::numeric_limits<std::uint64_t>::max();
/// Tags from here on are vessel's own (barrier and allreduce over point-to-point, and later
/// others): any_tag never matches them, so that an app's wildcard receive cannot take a message
/// of a collective (MPI keeps them apart with a communicator context; this is ours).
inline constexpr std::uint64_t reserved_tag_base = std::uint64_t{1} << 63;

/// One whole point-to-point message as the matcher sees it.
struct p2p_message {
  std::uint32_t source = 0;
  std::uint64_t tag = 0;
  std::uint64_t message_id = 0;  ///< the sender's id, for log lines
  io::buffer_slice payload;
};

/// Identifies a pending receive (for cancel); 0 is never a valid id.
using receive_id = std::uint64_t;

/// Bounds of a matcher. Every key with its default.
struct matcher_config {
  std::uint32_t world_size = 1;                   ///< sources are 0 .. world_size - 1
  std::size_t max_unexpected_bytes = 256u << 20;  ///< past this much pool memory held, credit is
                                                  ///< withheld
  std::size_t max_unexpected_messages = 65536;    ///< same, counting messages
  /// Withheld credit is returned once the queue is below this fraction of both bounds (hysteresis:
  /// no pause/resume flapping at the edge).
  double resume_fraction = 0.5;
  std::size_t initial_nodes = 1024;  ///< nodes reserved up front for each of the two queues
};

/// Where the matcher gives credit back: the owner forwards it to the link (mesh::release).
class credit_sink {
 public:
  virtual ~credit_sink() = default;
  /// Messages from `source` worth `credit` (message_credit() of each one's payload,
  /// link_credit.hpp) may be credited back to the sender now.
  virtual void release(std::uint32_t source, std::size_t credit) = 0;
  /// The unexpected queue went over its bound (true) or drained below its low-water mark (false).
  virtual void on_backpressure(bool over_bound) { (void)over_bound; }
};

/// Counters of a matcher.
struct matcher_stats {
  std::uint64_t arrived = 0;
  std::uint64_t matched_on_arrival = 0;  ///< found a pending receive
  std::uint64_t matched_on_post = 0;     ///< a receive found an unexpected message
  std::uint64_t claimed = 0;  ///< of matched_on_arrival: landed in the receive's own buffer
  std::uint64_t cancelled = 0;
  std::uint64_t credit_withheld = 0;  ///< messages buffered past the bound
  std::uint64_t backpressure_episodes = 0;
  std::size_t unexpected_messages = 0;  ///< now
  std::size_t unexpected_bytes = 0;     ///< now: the messages' lengths
  std::size_t unexpected_held_bytes = 0;  ///< now: the pool blocks they hold (the bound's measure)
  std::size_t unexpected_peak_bytes = 0;
  std::size_t pending_receives = 0;  ///< now
};

/// The matching engine. Not thread-safe: one owner thread.
class message_matcher {
 public:
  message_matcher(matcher_config config, credit_sink& sink);
  message_matcher(const message_matcher&) = delete;
  message_matcher& operator=(const message_matcher&) = delete;

  /// What post_receive() did: the message it took at once, or the id of the pending receive.
  struct post_result {
    std::optional<p2p_message> message;  ///< set: matched an unexpected message at once
    receive_id id = 0;                   ///< set when pending
  };
  /// Posts a receive for `source` (or any_source) and `tag` (or any_tag). `cookie` comes back with
  /// the completion. Fails with errc::source_out_of_range (actors/comm_errc.hpp).
  result<post_result> post_receive(std::uint32_t source, std::uint64_t tag, std::uint64_t cookie);

  /// A pending receive completed by an arriving message.
  struct completion {
    receive_id id;
    std::uint64_t cookie;
    p2p_message message;
  };
  /// Delivers an arriving message: the completion of the oldest pending receive that fits, or
  /// nullopt when it was queued as unexpected. Fails (and drops the message) with
  /// errc::source_out_of_range when its source is not a rank of the world.
  result<std::optional<completion>> arrive(p2p_message&& message);

  /// A pending receive, as oldest_fit() names it.
  struct pending_receive {
    receive_id id = 0;
    std::uint64_t cookie = 0;
  };
  /// The pending receive that a message from `source` with `tag` would complete if it arrived
  /// now (the oldest that fits), without taking it: the owner looks first at whether the message
  /// may land straight in that receive's buffer. nullopt when none, or `source` is out of range.
  std::optional<pending_receive> oldest_fit(std::uint32_t source,
                                            std::uint64_t tag) const noexcept;
  /// Takes the pending receive `id` for a message that has begun to arrive and will land in the
  /// receive's own buffer (counted as arrived and matched on arrival). The matcher never holds
  /// that message, so returning its credit is the owner's job once it is complete. False if `id`
  /// is not pending.
  bool claim(receive_id id) noexcept;

  /// Removes a pending receive (a timeout). False if it is not pending (already completed or
  /// cancelled): the caller then owns whatever completed it.
  bool cancel(receive_id id) noexcept;

  /// The oldest unexpected message that a receive for (`source`, `tag`) would take, without taking
  /// it (MPI_Iprobe); nullptr when none.
  const p2p_message* probe(std::uint32_t source, std::uint64_t tag) const noexcept;

  /// What post_receive() takes at once: the oldest unexpected message a receive for (`source`,
  /// `tag`) fits, taken; nullopt, and nothing posted, when none is here or `source` is out of
  /// range.
  std::optional<p2p_message> take_now(std::uint32_t source, std::uint64_t tag);

  const matcher_stats& stats() const noexcept { return stats_; }
  /// True while credit is withheld (the queue is over its bound and has not drained yet).
  bool over_bound() const noexcept { return over_bound_; }

 private:
  static constexpr std::uint32_t nil = std::numeric_limits<std::uint32_t>::max();

  struct unexpected_node {
    p2p_message message;
    std::uint32_t prev = nil, next = nil;          // arrival order, all sources
    std::uint32_t prev_src = nil, next_src = nil;  // arrival order, this source
    bool credit_held = false;
  };
  struct pending_node {
    std::uint32_t source = 0;
    std::uint64_t tag = 0;
    std::uint64_t cookie = 0;
    std::uint32_t generation = 0;  // bumped when the node is freed: stale ids cancel nothing
    std::uint32_t prev = nil, next = nil;
    bool live = false;
  };
  struct list {
    std::uint32_t head = nil, tail = nil;
  };

  static bool fits(std::uint32_t want_source, std::uint64_t want_tag, std::uint32_t source,
                   std::uint64_t tag) noexcept {
    return (want_source == any_source || want_source == source) &&
           (want_tag == tag || (want_tag == any_tag && tag < reserved_tag_base));
  }

  std::uint32_t find_unexpected(std::uint32_t source, std::uint64_t tag) const noexcept;
  p2p_message take_unexpected(std::uint32_t index);
  void queue_unexpected(p2p_message&& message);
  std::uint32_t allocate_pending();
  void free_pending(std::uint32_t index) noexcept;
  void unlink_pending(std::uint32_t index) noexcept;
  void update_bound();

  matcher_config config_;
  credit_sink& sink_;

  std::vector<unexpected_node> unexpected_;
  std::vector<std::uint32_t> free_unexpected_;
  list unexpected_all_;
  std::vector<list> unexpected_by_source_;

  std::vector<pending_node> pending_;
  std::vector<std::uint32_t> free_pending_;
  list pending_all_;

  std::size_t low_bytes_ = 0;
  std::size_t low_messages_ = 0;
  bool over_bound_ = false;
  matcher_stats stats_;
};

}  // namespace vessel::actors
