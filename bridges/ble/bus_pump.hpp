#pragma once
// Drives an sdbus-c++ 1.2 connection from an io::reactor: the bus fd is polled through the ring
// (POLL_ADD), sd-bus's own deadline (method-call timeouts) is a reactor timer, and every wake-up
// runs processPendingRequest() until the queue is empty. No event-loop thread, nothing blocks.
// sdbus-c++ 1.2's PollData has no eventFd, so every bus call must come from the reactor thread.

#include <cstdint>
#include <functional>
#include <memory>

#include <sdbus-c++/IConnection.h>

#include "io/io_op.hpp"
#include "io/reactor.hpp"

namespace vessel::bridges::ble {

class bus_pump {
 public:
  bus_pump(io::reactor& reactor, sdbus::IConnection& bus);
  bus_pump(const bus_pump&) = delete;
  bus_pump& operator=(const bus_pump&) = delete;
  ~bus_pump();

  /// Call after queueing a bus message: processing then runs on the next reactor turn (sd-bus
  /// is not re-entrant, and the caller may be inside a bus callback), which also re-arms the poll
  /// for POLLOUT if the message could not be written at once.
  void kick() noexcept;

  /// Processes everything pending and re-arms the poll and the timer (reactor thread).
  void pump();

  /// Stops polling; the ops complete with -ECANCELED later, so keep the pump alive until then.
  /// `released` runs on the reactor thread once no poll is in flight: at once when none is, else
  /// from the last cancelled poll's completion (also when the reactor stops and cancels it). An
  /// owner hands its last reference to `released` and the pump goes with it; a timer could not
  /// hold that reference, since a stopping reactor drops its timers while the polls are in flight.
  void shutdown(std::function<void()> released = {}) noexcept;
  /// True when no poll is in flight: the pump may be destroyed.
  bool idle() const noexcept { return !in_op_.in_flight() && !out_op_.in_flight(); }

 private:
  struct poll_op final : io::io_op {
    explicit poll_op(bus_pump& p) : owner(p) {}
    void complete(int res, std::uint32_t flags) override;
    bus_pump& owner;
  };

  void arm();
  void release_if_idle() noexcept;

  io::reactor& reactor_;
  sdbus::IConnection& bus_;
  poll_op in_op_{*this};
  poll_op out_op_{*this};
  io::timer_id timer_{};
  bool timer_armed_ = false;
  std::uint64_t timer_deadline_us_ = UINT64_MAX;
  bool kick_posted_ = false;
  bool stopped_ = false;
  std::function<void()> released_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // guards posted kicks and timers
};

}  // namespace vessel::bridges::ble
