#pragma once
// The reactor's timers: a min-heap of deadlines whose earliest one bounds the ring wait.
//
// Why a heap and not one IORING_OP_TIMEOUT per timer: transports re-arm a retry or heartbeat timer
// on almost every message and cancel it on almost every reply. Here add and cancel cost no SQE, no
// CQE and no syscall; the ring only sees the earliest deadline, as the timeout of the wait the
// reactor makes anyway (io_uring_submit_and_wait_timeout: EXT_ARG, or a TIMEOUT SQE before 5.11).

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

namespace vessel::io {

/// Identifies a timer for cancel; never 0, never reused by one queue.
using timer_id = std::uint64_t;

/// Timers of one thread (not thread-safe: the reactor owns it).
class timer_queue {
 public:
  using clock = std::chrono::steady_clock;

  /// Schedules `fn` to run at or after `deadline`.
  timer_id add(clock::time_point deadline, std::function<void()> fn);

  /// Cancels timer `id`; its callback never runs. False if it already ran or was cancelled.
  bool cancel(timer_id id) noexcept;

  /// The earliest pending deadline, if any.
  std::optional<clock::time_point> next_deadline() noexcept;

  /// A time that no pending deadline comes before (none: no timer at all): the earliest one kept,
  /// which may be a cancelled timer's. No lookup, for a "could anything be due?" test on every
  /// turn; run_due() then drops what was cancelled.
  std::optional<clock::time_point> no_deadline_before() const noexcept {
    if (heap_.empty()) return std::nullopt;
    return heap_.front().deadline;
  }

  /// Runs every timer due at `now`, earliest first (ties: the order of add). Timers that callbacks
  /// add are left for the next call, so a zero-delay timer cannot starve the reactor.
  std::size_t run_due(clock::time_point now);

  /// Cancels every timer.
  void clear() noexcept;

  /// Number of pending timers.
  std::size_t size() const noexcept { return callbacks_.size(); }

 private:
  struct entry {
    clock::time_point deadline;
    timer_id id;
    friend bool operator>(const entry& a, const entry& b) noexcept {
      return a.deadline != b.deadline ? a.deadline > b.deadline : a.id > b.id;
    }
  };
  void drop_cancelled_top() noexcept;

  std::vector<entry> heap_;  // std::push_heap with greater<>: min-heap; cancelled ids linger lazily
  using callback_map = std::unordered_map<timer_id, std::function<void()>>;
  /// A node of a timer that ran or was cancelled, reused by the next add(): a transport that
  /// re-arms a timer every period (the shm watchdog) then allocates nothing in steady state.
  void recycle(callback_map::node_type node) noexcept;
  callback_map callbacks_;
  std::vector<callback_map::node_type> spare_;
  timer_id next_id_ = 1;
};

}  // namespace vessel::io
