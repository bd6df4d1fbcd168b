#pragma once
// vessel::comm: the blocking facade for code that is not an actor, in the spirit of MPI and
// torch.distributed: init from the environment, rank/size, send/recv with MPI matching rules,
// isend/irecv, barrier, allreduce, finalize.
//
//   auto c = vessel::comm::init();                  // VESSEL_* / Open MPI / PMI / Slurm / torchrun
//   if (c.rank() == 0) c.send(bytes, 1, /*tag*/ 7);
//   else auto got = c.recv(0, 7, std::chrono::seconds{10});   // throws vessel::comm_timeout
//
// A message of any size is cut into chunks of the largest pooled block; each chunk carries
// (total length, offset), and the receiver takes the chunks that follow the first one from the
// same source and tag (non-overtaking keeps them in order). recv into a buffer posted before the
// chunks arrive takes them in place, with no copy through the pool; sends of VESSEL_LEND_BYTES
// or more lend the caller's buffer and return once the peer acked it. Tags at or above
// actors::reserved_tag_base are vessel's own (barrier, allreduce): sending one throws.
//
// Thread safety: one comm may be used from several threads at once (each blocking call waits on
// its own request); barrier and allreduce must be called in the same order on every rank.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "actors/comm_errc.hpp"
#include "actors/env.hpp"
#include "actors/message_matcher.hpp"
#include "actors/runtime.hpp"

namespace vessel {

/// A failed comm operation; code() is a comm_errc, an actors::errc or an io::errc.
class comm_error : public std::system_error {
 public:
  comm_error(std::error_code ec, const std::string& what) : std::system_error{ec, what} {}
};

/// A receive (or a collective's receive) that saw nothing matching within its timeout.
/// what(): "rank 1: no message from rank 3 with tag 7 within 2 s".
class comm_timeout : public comm_error {
 public:
  comm_timeout(std::uint32_t self, std::uint32_t peer, std::uint64_t tag,
               std::chrono::milliseconds waited);
  /// The source awaited (actors::any_source for a wildcard).
  std::uint32_t peer() const noexcept { return peer_; }
  /// The tag awaited (actors::any_tag for a wildcard).
  std::uint64_t tag() const noexcept { return tag_; }
  std::chrono::milliseconds waited() const noexcept { return waited_; }

 private:
  std::uint32_t peer_;
  std::uint64_t tag_;
  std::chrono::milliseconds waited_;
};

/// Wildcards, as in MPI.
inline constexpr std::uint32_t any_source = actors::any_source;
inline constexpr std::uint64_t any_tag = actors::any_tag;

/// Wait forever.
inline constexpr std::chrono::milliseconds no_timeout = std::chrono::milliseconds::max();

/// Reductions of allreduce.
enum class reduce_op : std::uint8_t { sum, prod, min, max };

/// What a receive got.
struct recv_status {
  std::uint32_t source = 0;
  std::uint64_t tag = 0;
  std::size_t bytes = 0;
  std::uint64_t message_id = 0;  ///< the link's id of the (first chunk of the) message
};

class comm;

/// A non-blocking send or receive in progress (std::future-like). Move-only. Destroying an
/// unfinished receive cancels it; destroying an unfinished send waits for the hand-over.
class comm_request {
 public:
  comm_request() noexcept;
  comm_request(comm_request&&) noexcept;
  comm_request& operator=(comm_request&&) noexcept;
  ~comm_request();

  /// True when wait() would not block (for a receive: its first chunk has arrived).
  bool ready() const noexcept;
  /// Waits until done; a send returns its status with bytes sent. Throws comm_error/comm_timeout.
  recv_status wait(std::chrono::milliseconds timeout = no_timeout);
  /// A receive's bytes (after wait(); moves them out).
  std::vector<std::byte> take_data();
  bool valid() const noexcept { return state_ != nullptr; }

 private:
  friend class comm;
  struct state;
  explicit comm_request(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> state_;
};

/// What this rank's single-copy sends did (VESSEL_PULL_BYTES): a blocking send of that size to
/// a rank reached by shared memory offers its buffer, and the receiver reads it in one copy.
struct pull_stats {
  std::uint64_t offered = 0;     ///< sends that offered their buffer
  std::uint64_t pulled = 0;      ///< ... that the receiver read
  std::uint64_t pushed = 0;      ///< ... of which this rank wrote the back half into the
                                 ///< receiver's buffer itself, while the receiver read the front
  std::uint64_t taken_late = 0;  ///< ... sent the ordinary way: the receiver took the offer late
  std::uint64_t refused = 0;     ///< ... sent the ordinary way: the receiver could not read it
  std::uint64_t discarded = 0;   ///< ... that the receiver refused whole: its buffer was too
                                 ///< small (its receive failed with buffer_too_small)
  std::uint64_t pulls_done = 0;  ///< receives that read a sender's buffer
};

/// One rank's communicator over the whole world.
class comm {
 public:
  /// Bootstraps from the process environment (see README, "Environment variables"), connects to
  /// every rank and returns once all links are up. Throws comm_error naming what failed.
  static comm init();
  /// As init(), from `env`, with `options` (tests run several ranks in one process this way).
  static comm init(const actors::env_view& env,
                   actors::runtime_options options = actors::runtime_options::defaults());

  comm(comm&&) noexcept;
  comm& operator=(comm&&) noexcept;
  /// finalize() if it has not run.
  ~comm();

  std::uint32_t rank() const;
  std::uint32_t size() const;

  /// Sends `data` to `dst` with `tag` (below actors::reserved_tag_base). Returns once the bytes
  /// are copied and handed to the link; blocks while the link pushes back (bounded memory). A
  /// large message returns once the peer has it: lent to the link (VESSEL_LEND_BYTES) until
  /// acked, or read by a receiver on this host straight from `data` (VESSEL_PULL_BYTES).
  void send(std::span<const std::byte> data, std::uint32_t dst, std::uint64_t tag);
  /// Receives a message from `src` (or any_source) with `tag` (or any_tag) into `buffer`.
  /// Throws comm_timeout after `timeout`, comm_error(buffer_too_small) when it does not fit (the
  /// message is consumed).
  recv_status recv(std::span<std::byte> buffer, std::uint32_t src, std::uint64_t tag,
                   std::chrono::milliseconds timeout = no_timeout);
  /// Receives a message of any size.
  std::vector<std::byte> recv(std::uint32_t src, std::uint64_t tag,
                              std::chrono::milliseconds timeout = no_timeout,
                              recv_status* status = nullptr);

  /// Starts a send; the bytes are copied before it returns, so `data` may be reused at once.
  comm_request isend(std::span<const std::byte> data, std::uint32_t dst, std::uint64_t tag);
  /// Starts a receive; wait() then take_data().
  comm_request irecv(std::uint32_t src, std::uint64_t tag);

  /// Returns once every rank has entered the barrier (dissemination: ceil(log2 n) rounds).
  void barrier(std::chrono::milliseconds timeout = no_timeout);
  /// Element-wise reduction of `data` over every rank, in place; the same result, bit for bit,
  /// on every rank (recursive doubling; ranks past the largest power of two fold in first).
  template <class T>
  void allreduce(std::span<T> data, reduce_op op, std::chrono::milliseconds timeout = no_timeout);

  /// Counters of the link to `peer` (frames, bytes, retransmits, credit stalls, RTT).
  actors::peer_link_stats link_stats(std::uint32_t peer);
  /// Matching counters (unexpected queue, backpressure).
  actors::matcher_stats matching_stats();
  /// Single-copy send counters.
  vessel::pull_stats pull_stats() const;
  /// The runtime underneath (store, fault injection).
  actors::runtime& runtime();

  /// Barrier, then closes every link and stops the runtime. Idempotent.
  void finalize();
  /// Closes without the barrier (a rank leaving on an error).
  void abort();

 private:
  friend class comm_request;
  struct impl;
  explicit comm(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> impl_;
};

extern template void comm::allreduce<std::int32_t>(std::span<std::int32_t>, reduce_op,
                                                   std::chrono::milliseconds);
extern template void comm::allreduce<std::int64_t>(std::span<std::int64_t>, reduce_op,
                                                   std::chrono::milliseconds);
extern template void comm::allreduce<std::uint64_t>(std::span<std::uint64_t>, reduce_op,
                                                    std::chrono::milliseconds);
extern template void comm::allreduce<float>(std::span<float>, reduce_op, std::chrono::milliseconds);
extern template void comm::allreduce<double>(std::span<double>, reduce_op,
                                             std::chrono::milliseconds);

}  // namespace vessel
