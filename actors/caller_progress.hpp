#pragma once
// Caller-driven progress: a thread that waits for something the rank's loop delivers runs the
// loop itself instead of sleeping until the reactor thread wakes it (vessel::comm's waiters,
// actors::driving_scoped_actor). Its settings, read from the environment, and the loop a waiter
// runs while it holds the reactor's loop.

#include <sched.h>

#include <chrono>
#include <cstdint>
#include <optional>

#include "actors/detailed_error.hpp"
#include "actors/drive_budget.hpp"
#include "actors/env.hpp"
#include "io/reactor.hpp"

namespace vessel::actors {

struct caller_progress_config {
  /// Waiters drive the loop (VESSEL_PROGRESS=caller, the default; =thread turns it off).
  bool enabled = true;
  /// How long a waiter drives the loop with no frame arriving before it gives it back and sleeps
  /// (a long wait must not burn a core: ranks of a job often outnumber cores).
  /// VESSEL_PROGRESS_SPIN_US.
  std::chrono::microseconds spin{200};
  /// A waiter yields the CPU between turns (sched_yield), so that the rank it waits for gets the
  /// core. Unset: on when this host runs more ranks than the process may use CPUs
  /// (oversubscribed), as Open MPI's mpi_yield_when_idle. VESSEL_YIELD_WHEN_IDLE=0|1.
  std::optional<bool> yield_when_idle;

  /// Reads the three variables; a malformed value is an error naming it, and changes nothing
  /// read after it.
  detailed_result<void> apply_env(const env_view& env);

  /// Whether waiters yield on a host that runs `ranks_on_host` ranks and lets this process use
  /// `cpus` CPUs: yield_when_idle if set, else whether the ranks outnumber the CPUs.
  bool waiters_yield(std::uint32_t ranks_on_host, unsigned cpus) const noexcept {
    return yield_when_idle.value_or(ranks_on_host > cpus);
  }
};

/// Turns of the loop that the calling thread holds (io::reactor::borrow) until `done()`, the
/// budget runs out or the reactor stops; true when `done()`. The caller gives the loop back.
template <class Done>
bool drive_held_loop(io::reactor& r, drive_budget& budget, bool yield, Done&& done) {
  for (unsigned i = 0;; ++i) {
    r.borrowed_turn();
    if (done()) {
      // Work this turn queued for the loop (a transport's continuation, an ack) goes out now,
      // not when the next holder comes.
      for (int more = 0; more < 4 && r.work_waiting(); ++more) r.borrowed_turn();
      return true;
    }
    if (r.stop_requested()) return false;
    // Oversubscribed: the reply we spin for needs a rank that may be waiting for this core.
    if (yield) ::sched_yield();
    // The budget is counted from the first look at the clock, 64 turns in: a wait that ends
    // sooner (a ping-pong's) reads no clock at all.
    if ((i & 63) == 63 && !budget.keep_going(drive_budget::clock::now(), r.arrivals())) {
      return false;
    }
  }
}

}  // namespace vessel::actors
