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
//   bits 48..61 = communicator id (14 bits), bits 0..47 = sequence number of the collective.
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
// Flow: at most max_sends_in_flight chunk sends outstanding per collective (emit waits for the
// oldest one beyond that; a send completes once the link accepted it) and receive_window
// receives posted (any source, the collective's tag); unexpected chunks beyond those are held
// by the runtime's matcher, bounded by VESSEL_UNEXPECTED_BYTES.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
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

/// The tag of collective `sequence` on communicator `id` (layout above).
constexpr std::uint64_t collective_tag(std::uint32_t id, std::uint64_t sequence) noexcept {
  return (std::uint64_t{1} << 63) | communicator_tag_bit |
         (std::uint64_t{id & max_communicator_id} << 48) |
         (sequence & ((std::uint64_t{1} << 48) - 1));
}

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
  /// The runtime (world) rank of member `r` of this communicator.
  std::uint32_t world_rank(std::uint32_t r) const noexcept;
  algorithm_selector& selector() noexcept { return selector_; }

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
  std::uint64_t sequence_ = 0;
  std::uint32_t incarnation_ = 0;
};

}  // namespace vessel::collectives
