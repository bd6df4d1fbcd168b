#pragma once
// vessel::collectives::collective_driver: one thread that runs a communicator's non-blocking
// collectives for callers that must not block (the collective actor, collective_actor.hpp).
//
// Why a thread of its own: communicator's wait() blocks, and a family of communicators is
// used from one thread at a time, so a CAF handler can neither wait nor hand collectives to
// whichever worker runs it next. The driver starts every job as soon as it is handed over
// (collectives on several communicators of the family then never wait on each other), advances
// all of them with test(), and sleeps on the runtime's events word (actors::runtime::
// wait_events), which every completion of a collective's request and every link state change
// moves, so a completion wakes it at once. The sleep is capped by `poll_period`: that cap is
// only how long a job handed over while others are in flight may wait to be started (with
// nothing in flight the driver sleeps on a condition variable and a new job wakes it at once).
//
// test() does not apply the communicator's failure checks (a member gone for good, the
// call's timeout): those run inside wait(). So once a job is past its timeout, or a member of
// the communicator is down while it is in flight, the driver waits for that job with wait(),
// which fails it (errc::rank_failed naming the dead ranks, errc::timed_out naming the round)
// and returns; while it waits, a nudger pokes the runtime's events word every poll_period (a
// receive on a tag nobody sends, cancelled at once) so that wait() re-checks the members even
// when no event would come any more. Jobs handed over meanwhile start once it returns.
//
// Each job's `done` callback runs on the driver thread, once, with the outcome; it must not
// block (the collective actor sends itself a message). The communicator must outlive the driver;
// the driver's destructor answers the jobs not yet started with actor_errc::node_stopped and
// waits for those in flight (a collective cannot be abandoned half-way on one rank only).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "collectives/communicator.hpp"
#include "collectives/dtype.hpp"
#include "collectives/operation.hpp"

namespace vessel::collectives {

/// One collective as a caller hands it over: the operation, the input (owned), the parameters.
/// Buffer shapes (counts in elements of `type`; n = communicator size):
///   barrier: no input. broadcast, reduce, allreduce: output as large as the input (broadcast:
///   every rank passes the count, only the root's bytes are read). allgather, gather: output n
///   times the input (gather: returned at the root only, empty elsewhere). reduce_scatter:
///   input n blocks, output one. scatter: input n blocks on every rank (only the root's bytes
///   are read), output one. alltoall: input and output n blocks each.
struct collective_call {
  collective_op op = collective_op::barrier;
  dtype type = dtype::uint8;
  reduce_op reduction = reduce_op::sum;
  std::uint32_t root = 0;
  std::string algorithm;  ///< empty: VESSEL_ALGO_<OP>, then the selection table
  std::chrono::milliseconds timeout = std::chrono::milliseconds::max();
  std::vector<std::byte> input;
};

/// What became of a call: the output bytes, or an error with the communicator's detail (e.g.
/// "allreduce #4 (ring): rank(s) [3] gone (world rank(s) [3]): link down").
struct collective_outcome {
  std::error_code error;
  std::string detail;
  std::vector<std::byte> output;
};

struct collective_driver_config {
  /// Longest sleep while collectives are in flight (see the header comment).
  std::chrono::microseconds poll_period{std::chrono::milliseconds{2}};
};

/// Counters of a driver (any thread).
struct collective_driver_stats {
  std::uint64_t started = 0;    ///< jobs handed to the communicator
  std::uint64_t succeeded = 0;  ///< jobs answered with an output
  std::uint64_t failed = 0;     ///< jobs answered with an error (bad call, failure, stop)
  std::uint64_t forced = 0;     ///< waits on a job past its timeout or with a member down
  std::uint64_t in_flight = 0;  ///< now
};

class collective_driver {
 public:
  using completion = std::function<void(collective_outcome)>;

  /// Starts the thread over `comm` (which must outlive the driver and be used by nothing else
  /// while the driver runs: a family is driven from one thread at a time).
  explicit collective_driver(communicator& comm, actors::runtime& rt,
                             collective_driver_config config = {});
  ~collective_driver();
  collective_driver(const collective_driver&) = delete;
  collective_driver& operator=(const collective_driver&) = delete;

  /// Any thread. Queues `call`; `done` runs once on the driver thread with its outcome. Calls
  /// start in the order submitted (every rank must submit the same collectives in the same
  /// order per communicator, as with the blocking calls).
  void submit(collective_call call, completion done);

  collective_driver_stats stats() const;
  std::uint32_t rank() const noexcept { return rank_; }
  std::uint32_t size() const noexcept { return size_; }

  /// The output bytes a call needs on this rank (and whether its shape is valid: errc::
  /// size_mismatch names what is wrong otherwise).
  static result<std::size_t> output_bytes(const collective_call& call, std::uint32_t size);

 private:
  struct job {
    collective_call call;
    completion done;
    std::vector<std::byte> output;
    collective_request request;
    std::chrono::steady_clock::time_point deadline;
  };

  void run();
  void start(job& j);
  void finish(job& j);
  void nudge_loop();
  void poke();

  communicator& comm_;
  actors::runtime& rt_;
  const collective_driver_config config_;
  const std::uint32_t rank_;
  const std::uint32_t size_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<job> queued_;         // guarded by mutex_
  bool stopping_ = false;          // guarded by mutex_
  bool nudging_ = false;           // guarded by mutex_: the driver is inside a forced wait()
  bool driver_done_ = false;       // guarded by mutex_: the driver thread has returned
  collective_driver_stats stats_;  // guarded by mutex_

  std::list<job> in_flight_;  // driver thread only
  std::thread nudger_;
  std::thread thread_;
};

}  // namespace vessel::collectives
