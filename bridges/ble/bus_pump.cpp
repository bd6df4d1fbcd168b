#include "bridges/ble/bus_pump.hpp"

#include <poll.h>
#include <time.h>

#include <utility>

namespace vessel::bridges::ble {
namespace {

std::uint64_t monotonic_us() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec) / 1000u;
}

}  // namespace

bus_pump::bus_pump(io::reactor& reactor, sdbus::IConnection& bus) : reactor_{reactor}, bus_{bus} {}

bus_pump::~bus_pump() {
  *alive_ = false;
  if (timer_armed_ && reactor_.ring_open() && reactor_.is_reactor_thread())
    reactor_.cancel_timer(timer_);
}

void bus_pump::poll_op::complete(int res, std::uint32_t) {
  // Nothing may touch `owner` after release_if_idle(): the pump may be gone.
  if (res == -ECANCELED || owner.stopped_) return owner.release_if_idle();
  owner.pump();
}

void bus_pump::release_if_idle() noexcept {
  if (!stopped_ || !idle() || !released_) return;
  // Destroying the callback may destroy this pump (it may hold its owner's last reference).
  auto released = std::exchange(released_, nullptr);
  released();
}

void bus_pump::kick() noexcept {
  if (kick_posted_ || stopped_) return;
  kick_posted_ = true;
  std::weak_ptr<bool> alive = alive_;
  reactor_.post([this, alive] {
    if (alive.expired()) return;
    kick_posted_ = false;
    pump();
  });
}

void bus_pump::pump() {
  if (stopped_) return;
  // Each call dispatches at most one message (a reply, a signal) to its callback.
  while (bus_.processPendingRequest()) {
    if (stopped_) return;
  }
  arm();
}

void bus_pump::arm() {
  const auto data = bus_.getEventLoopPollData();
  if (!in_op_.in_flight()) reactor_.poll_add(in_op_, data.fd, POLLIN);
  if ((data.events & POLLOUT) && !out_op_.in_flight()) reactor_.poll_add(out_op_, data.fd, POLLOUT);

  // sd-bus's next deadline (absolute CLOCK_MONOTONIC microseconds): the earliest method timeout.
  if (data.timeout_usec == timer_deadline_us_ && timer_armed_) return;
  if (timer_armed_) reactor_.cancel_timer(timer_);
  timer_armed_ = false;
  timer_deadline_us_ = data.timeout_usec;
  if (data.timeout_usec == UINT64_MAX) return;
  const auto now = monotonic_us();
  const auto delay =
      std::chrono::microseconds{data.timeout_usec > now ? data.timeout_usec - now : 0};
  std::weak_ptr<bool> alive = alive_;
  timer_ = reactor_.add_timer(delay, [this, alive] {
    if (alive.expired()) return;
    timer_armed_ = false;
    timer_deadline_us_ = UINT64_MAX;
    pump();
  });
  timer_armed_ = true;
}

void bus_pump::shutdown(std::function<void()> released) noexcept {
  stopped_ = true;
  if (released) released_ = std::move(released);
  if (reactor_.ring_open()) {
    if (in_op_.in_flight()) reactor_.cancel(in_op_);
    if (out_op_.in_flight()) reactor_.cancel(out_op_);
    if (timer_armed_) reactor_.cancel_timer(timer_);
    timer_armed_ = false;
  }
  release_if_idle();
}

}  // namespace vessel::bridges::ble
