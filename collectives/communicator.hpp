#pragma once
// vessel::collectives::communicator: the collectives of collectives/algorithms/ over real ranks
// (an actors::runtime). Every call of every rank must come in the same order, as in MPI.
//
// Driving: from the calling thread, through p2p_requests handed to the runtime's reactor in
// batches (the reactor-thread driver of DESIGN.md is the next step). A collective in progress
// advances inside wait() of any collective of the same family (below), so several non-blocking
// collectives never wait on each other. wait() sleeps on the runtime's events word
// (actors::runtime::wait_events), which every request of a collective and every link state
// change moves: the completion itself wakes the waiter, and the sleep ends no later than the
// earliest collective's timeout.
//
// Tags (in actors::reserved_tag_base's range; comm.cpp's own collectives use bit 63 with a
// sequence number in bits 16..61, far below bit 62):
//   bit 63 = 1 (reserved), bit 62 = 1 (communicator traffic),
//   bits 48..61 = communicator id (14 bits), bits 40..47 = attempt (8 bits, the restart epoch
//   below, mod 256), bits 0..39 = sequence number of the collective.
// Every chunk carries an 8-byte header (algorithm step, chunk index), little-endian, then data.
//
// Communicators: create() makes the world over a runtime; split(), dup() and shrink() make
// children that share its driver (one list of active collectives per family), so waiting on a
// collective of any of them drives all of them. A child's id is agreed on the parent: the max of
// every member's next free id (process-wide per runtime), so it is new to each member and two
// communicators a rank belongs to never share an id. A family is used from one thread at a time.
//
// Failures (docs/collective_algorithms.md, "Failures"): a link that drops and comes back is the
// mesh's business (messages are resent, once, in order), the collective only waits. A member
// whose link goes down (not back within VESSEL_RECONNECT_TIMEOUT_MS, or silent past
// VESSEL_PEER_TIMEOUT_MS) fails every collective of the communicator with errc::rank_failed;
// detail() names the dead ranks; shrink() then agrees on the survivors.
//
// Restarts (communicator_options::retry_on_restart, on by default when VESSEL_RESTARTS > 0, as
// under vessel-run --restart): a member whose process dies and comes back as a new incarnation
// within the reconnect deadline fails nothing. Every rank counts the restarts it has seen (the
// epoch: runtime::peer_restarts summed over the world, plus what a restarted rank inherits), and
// every collective runs under the epoch of its start as its tag's attempt. When the epoch moves
// under a collective in flight, the survivor abandons the attempt (receives cancelled, sends
// handed over, the driver and its kept chunks dropped: nothing of it reaches the retry, and
// chunks of it still on the wire carry the old attempt and never match again), waits until every
// member's link is up, and starts it again from its inputs (in-place calls read a copy taken at
// the start, only when retrying is on). A survivor that sees a restart of world rank m publishes
// in the store, under "vessel/coll/rejoin/<m>/<restart count>/<own world rank>", the world
// communicator's sequence number the restarted rank must join (the oldest in flight, else the
// next) and the epoch; the restarted rank's create() waits for every survivor's record (up to
// VESSEL_CONNECT_TIMEOUT_MS), requires them to agree, and starts there: rejoin_sequence() tells
// the app which call it is joining. Nothing else is replayed: the app re-syncs its own state.
// Limits: the world communicator only (a restarted rank's split/dup children are not rebuilt); a
// survivor that already finished the collective the others retry has moved on, so the records
// disagree and the restarted rank's create() fails (errc::rejoin_mismatch), the survivors then
// time out; a restart of rank 0 needs a store that outlives it (vessel-run's) and is untested.
//
// Flow: at most max_sends_in_flight chunk sends outstanding per collective (emit waits for the
// oldest one beyond that; a send completes once the link accepted it) and receive_window
// receives posted (any source, the collective's tag; no more than messages are still due where
// the algorithm counts its chunks, algorithm::chunks_to_receive); unexpected chunks beyond those
// are held by the runtime's matcher, bounded by VESSEL_UNEXPECTED_BYTES.
//
// Copies: a chunk of a link fragment or more whose bytes stay put until the peer has them
// (send_step::lendable: the ring's and the tree broadcast's) is sent as a split message: its
// header is copied into a send block, the bytes are lent to the link from the caller's buffer
// (io::borrowed_memory), and the collective completes only once the peer acked every lent byte
// (or the link dropped them going down), so the caller's buffers are its own again when wait()
// returns. At most 2 x max_sends_in_flight loans are out per collective.
//
// One copy: to a rank on this host (shared memory), a call whose chunks are pull_bytes or more
// sends each lendable chunk as an offer instead (chunk_offer.hpp): the peer reads the bytes
// from our memory with process_vm_readv straight into their place (or next to the cache it
// reduces them from) and answers; the ring's two copies, into the shared area and out, become
// one. The call completes only once every offer is answered. A peer that cannot read our memory
// (Yama, seccomp, another user) answers "refused", and that chunk and every later one go to it
// the ordinary way, in their order. A call that fails with offers open waits up to 100 ms for
// the answers of the peers still up, so that no peer reads the bytes after wait() returned (a
// peer stalled for longer than that still could, into a call of its own that cannot succeed
// without ours).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/dtype.hpp"
#include "collectives/operation.hpp"
#include "collectives/selection.hpp"
#include "wire/result.hpp"

namespace vessel::actors {
class runtime;
}

namespace vessel::collectives {

inline constexpr std::uint64_t communicator_tag_bit = std::uint64_t{1} << 62;
inline constexpr std::uint32_t max_communicator_id = (1u << 14) - 1;

inline constexpr unsigned attempt_shift = 40;
inline constexpr std::uint64_t max_attempt = 0xff;

/// The tag of attempt `attempt` (mod 256) of collective `sequence` (mod 2^40) on communicator
/// `id` (layout above).
constexpr std::uint64_t collective_tag(std::uint32_t id, std::uint64_t sequence,
                                       std::uint64_t attempt = 0) noexcept {
  return (std::uint64_t{1} << 63) | communicator_tag_bit |
         (std::uint64_t{id & max_communicator_id} << 48) |
         ((attempt & max_attempt) << attempt_shift) |
         (sequence & ((std::uint64_t{1} << attempt_shift) - 1));
}

/// What a survivor publishes for a restarted rank: the world communicator's sequence number it
/// joins and the epoch (restarts seen) the survivors run it under.
struct rejoin_record {
  std::uint64_t sequence = 0;
  std::uint64_t epoch = 0;

  /// "<sequence> <epoch>", the store value.
  std::string encode() const;
  /// The value of encode(); errc::protocol_violation for anything else.
  static result<rejoin_record> decode(std::string_view text);
  /// The store key a survivor (world rank `survivor`) writes for restart `restart` (its count of
  /// restarts of `rank`, which is the restarted process's VESSEL_INCARNATION) of world rank `rank`.
  static std::string key(std::uint32_t rank, std::uint64_t restart, std::uint32_t survivor);
  friend bool operator==(const rejoin_record&, const rejoin_record&) = default;
};

/// Per call: which algorithm (empty: VESSEL_ALGO_<OP>, then the table), the root, a timeout.
struct call_options {
  std::string_view algorithm{};
  std::uint32_t root = 0;
  std::chrono::milliseconds timeout = std::chrono::milliseconds::max();
  std::size_t chunk_bytes = 0;  ///< 0: the largest that fits one runtime message (<= 1 MiB)
};

struct communicator_options {
  std::uint32_t id = 0;                 ///< tells communicators apart in the tag
  std::size_t max_sends_in_flight = 8;  ///< per collective
  std::size_t receive_window = 8;       ///< receives posted ahead per collective
  /// World communicator only: retry a collective in flight when a member restarts, and rejoin
  /// when this process is a restart (header comment). Unset: VESSEL_RESTARTS > 0.
  std::optional<bool> retry_on_restart;
  /// World communicator only: a call whose chunks are this large (bytes) offers them to the
  /// ranks on this host, which read them from our memory (header comment, "One copy"). 0 never.
  /// Unset: VESSEL_PULL_BYTES, else 256 KiB where a pull pays on this machine and never where
  /// it does not (io/single_copy_probe.hpp).
  std::optional<std::size_t> pull_bytes;
};

/// Offered chunks (communicator_options::pull_bytes) since the world communicator was made,
/// counted over its family (split, dup, shrink).
struct chunk_pull_stats {
  std::uint64_t offered = 0;  ///< chunks this rank offered
  std::uint64_t pulled = 0;   ///< offers this rank took: read from the offering rank's memory
  std::uint64_t refused = 0;  ///< offers this rank could not take (sent to it again instead)
};

/// split(): this rank joins no new communicator.
inline constexpr int undefined_color = -1;

class communicator;
struct collective_state;
struct collective_engine;
struct communicator_group;

/// A non-blocking collective in progress. Move-only; destroying an unfinished one waits for it.
class collective_request {
 public:
  collective_request() noexcept;
  collective_request(collective_request&&) noexcept;
  collective_request& operator=(collective_request&&) noexcept;
  ~collective_request();

  /// Drives every collective of the communicator until this one is done; its outcome (errc::
  /// timed_out names the operation, round and awaited peers in the log).
  result<void> wait();
  /// Advances without blocking; true once done (wait() then returns at once).
  bool test();
  bool valid() const noexcept { return state_ != nullptr; }
  /// Once failed: what happened, e.g. "allreduce #4 (ring): rank(s) [3] down (world rank(s)
  /// [3])"; empty otherwise.
  std::string detail() const;

 private:
  friend class communicator;
  collective_request(std::shared_ptr<collective_engine> engine,
                     std::shared_ptr<collective_state> s) noexcept;
  std::shared_ptr<collective_engine> engine_;
  std::shared_ptr<collective_state> state_;
};

class communicator {
 public:
  /// The world communicator over `rt` (which must outlive it). The selector reads
  /// VESSEL_ALGO_<OP>; a bad value there is an error here.
  static result<std::unique_ptr<communicator>> create(actors::runtime& rt,
                                                      communicator_options options = {});
  ~communicator();
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  std::uint32_t rank() const noexcept;
  std::uint32_t size() const noexcept;
  std::uint32_t id() const noexcept { return options_.id; }
  chunk_pull_stats pull_stats() const noexcept;
  /// The runtime (world) rank of member `r` of this communicator.
  std::uint32_t world_rank(std::uint32_t r) const noexcept;
  algorithm_selector& selector() noexcept { return selector_; }
  /// Whether every other member is reached by shared memory. The same on every member: the
  /// pair rule (same host, VESSEL_TRANSPORT) is one every rank applies alike.
  link_class links() const noexcept { return links_; }
  /// The algorithm a call of `op` on `bytes` (as algorithm_selector::select counts them) runs
  /// here: this communicator's size and links, `per_call` as call_options::algorithm.
  result<std::string_view> algorithm_for(collective_op op, std::size_t bytes,
                                         std::string_view per_call = {}) const;

  // -- New communicators. Collective over this one (every member calls, in the same order as
  // its other collectives); each burns one sequence number here.

  /// Members with the same `color` form a new communicator, ranked by (key, rank here). Null for
  /// color undefined_color (or any negative color). The child inherits the selector.
  result<std::unique_ptr<communicator>> split(int color, int key, call_options o = {});
  /// Same members, same ranks, a new id: its collectives never meet this one's.
  result<std::unique_ptr<communicator>> dup(call_options o = {}) {
    return split(0, int(rank()), o);
  }
  /// After errc::rank_failed: the members whose links are not down, in the same order. Waits
  /// (up to o.timeout) until no member's link is between up and down, then agrees with the
  /// survivors on who is left (errc::rank_failed if they disagree: call it again).
  result<std::unique_ptr<communicator>> shrink(call_options o = {});
  /// Members (ranks here) whose links the runtime reports down, ascending.
  std::vector<std::uint32_t> dead_ranks() const;
  /// True when this process is a restart (VESSEL_INCARNATION > 0, set by vessel-run --restart):
  /// the app must rejoin what its peers are doing, it has no state of its old self.
  bool restarted() const noexcept { return incarnation_ > 0; }
  std::uint32_t incarnation() const noexcept { return incarnation_; }
  /// A restarted rank retrying in flight collectives (retry_on_restart): the sequence number of
  /// the world communicator's call it joins (its first collective call here is that one; the
  /// survivors are retrying it). Collectives are numbered from 0 in call order, every call (split
  /// and dup included) counting one. Empty when not a restart or not retrying.
  std::optional<std::uint64_t> rejoin_sequence() const noexcept { return rejoin_sequence_; }

  // Non-blocking forms; each blocking one is the same call followed by wait(). Spans: counts in
  // elements of `type`. In place: pass the same memory as input and output (allgather/gather:
  // input = output's own block; reduce_scatter: output = input's first block).

  /// Zero-byte dissemination.
  collective_request ibarrier(call_options o = {});
  /// count elements: root's input is sent, output receives (root: input may alias output).
  collective_request ibroadcast(std::span<const std::byte> input, std::span<std::byte> output,
                                dtype type, call_options o = {});
  collective_request ireduce(std::span<const std::byte> input, std::span<std::byte> output,
                             dtype type, reduce_op op, call_options o = {});
  collective_request iallreduce(std::span<const std::byte> input, std::span<std::byte> output,
                                dtype type, reduce_op op, call_options o = {});
  /// input: one block; output: size() blocks.
  collective_request iallgather(std::span<const std::byte> input, std::span<std::byte> output,
                                dtype type, call_options o = {});
  /// input: size() blocks; output: one block (the reduction of everyone's block rank()).
  collective_request ireduce_scatter(std::span<const std::byte> input, std::span<std::byte> output,
                                     dtype type, reduce_op op, call_options o = {});
  /// input: one block; output: size() blocks at the root (ignored elsewhere).
  collective_request igather(std::span<const std::byte> input, std::span<std::byte> output,
                             dtype type, call_options o = {});
  /// input: size() blocks at the root (ignored elsewhere); output: one block.
  collective_request iscatter(std::span<const std::byte> input, std::span<std::byte> output,
                              dtype type, call_options o = {});
  /// input and output: size() blocks each (block j to / from rank j).
  collective_request ialltoall(std::span<const std::byte> input, std::span<std::byte> output,
                               dtype type, call_options o = {});

  result<void> barrier(call_options o = {}) { return ibarrier(o).wait(); }
  result<void> broadcast(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                         call_options o = {}) {
    return ibroadcast(in, out, t, o).wait();
  }
  result<void> reduce(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                      reduce_op op, call_options o = {}) {
    return ireduce(in, out, t, op, o).wait();
  }
  result<void> allreduce(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                         reduce_op op, call_options o = {}) {
    return iallreduce(in, out, t, op, o).wait();
  }
  result<void> allgather(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                         call_options o = {}) {
    return iallgather(in, out, t, o).wait();
  }
  result<void> reduce_scatter(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                              reduce_op op, call_options o = {}) {
    return ireduce_scatter(in, out, t, op, o).wait();
  }
  result<void> gather(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                      call_options o = {}) {
    return igather(in, out, t, o).wait();
  }
  result<void> scatter(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                       call_options o = {}) {
    return iscatter(in, out, t, o).wait();
  }
  result<void> alltoall(std::span<const std::byte> in, std::span<std::byte> out, dtype t,
                        call_options o = {}) {
    return ialltoall(in, out, t, o).wait();
  }

  /// The generic entry: params.rank/size are filled in; count and buffers as algorithm.hpp says.
  collective_request start(collective_op op, algorithm_params params, algorithm_buffers buffers,
                           std::size_t message_bytes, const call_options& o);

 private:
  friend class collective_request;
  friend struct collective_engine;  // a rejoin record names the world's next sequence
  communicator(std::shared_ptr<collective_engine> engine,
               std::shared_ptr<const communicator_group> group, communicator_options options);
  /// A child over `members` (ranks here) with id `id`, sharing this one's driver and selector.
  std::unique_ptr<communicator> child(const std::vector<std::uint32_t>& members,
                                      std::uint32_t id) const;
  /// Allgathers `mine` (n int64 per rank) over this communicator: the agreement under split and
  /// shrink.
  result<std::vector<std::int64_t>> exchange(std::span<const std::int64_t> mine,
                                             const call_options& o);

  std::shared_ptr<collective_engine> engine_;
  std::shared_ptr<const communicator_group> group_;
  communicator_options options_;
  algorithm_selector selector_;
  link_class links_ = link_class::mixed;
  std::uint64_t sequence_ = 0;
  std::uint32_t incarnation_ = 0;
  std::optional<std::uint64_t> rejoin_sequence_;
};

}  // namespace vessel::collectives
