#pragma once
// How long a waiting caller keeps driving the rank's loop (caller-driven progress,
// runtime::drive_until) before it hands the loop back to the reactor thread and sleeps.
//
// The budget runs out after `spin` with no frame arriving, or at the wait's deadline (a fixed
// time, or a timeout counted from the first look at the clock, whichever comes first). While
// frames keep coming (a large message landing, the acks of a lent send), the caller takes them
// as well as the reactor thread would, and handing over would cost two thread hand-offs per
// message and, on a machine with few cores, a fourth runnable thread competing with the ranks:
// measured on 2 vCPUs, a 4 MiB shm stream went from 5-6 to 10-14 GB/s when its waiters stopped
// handing over mid-message (docs/io_performance.md, "Waiters that keep the loop while frames
// come").
//
// Pure: the caller passes the clock reading and the reactor's arrival count at each look.

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace vessel::actors {

class drive_budget {
 public:
  using clock = std::chrono::steady_clock;

  drive_budget(clock::duration spin, clock::time_point deadline,
               clock::duration timeout = clock::duration::max()) noexcept
      : spin_{spin}, deadline_{deadline}, timeout_{timeout} {}

  /// One look at the clock, with the arrivals counted so far. The first look starts the budget.
  /// False once the caller should stop driving.
  bool keep_going(clock::time_point now, std::uint64_t arrivals) noexcept {
    if (!started_) {
      started_ = true;
      first_look_ = now;
      arrivals_ = arrivals;
      if (timeout_ < deadline_ - now) deadline_ = now + timeout_;
      until_ = std::min(deadline_, now + spin_);
    }
    if (now < until_) return true;
    if (arrivals == arrivals_ || now >= deadline_) return false;
    arrivals_ = arrivals;  // frames came during the last window: another window
    until_ = std::min(deadline_, now + spin_);
    return true;
  }

  /// The first clock reading, once keep_going() was called.
  bool started() const noexcept { return started_; }
  clock::time_point first_look() const noexcept { return first_look_; }

 private:
  clock::duration spin_;
  clock::time_point deadline_;
  clock::duration timeout_;
  clock::time_point until_{};
  clock::time_point first_look_{};
  std::uint64_t arrivals_ = 0;
  bool started_ = false;
};

}  // namespace vessel::actors
