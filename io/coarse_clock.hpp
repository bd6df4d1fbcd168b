#pragma once
// A monotonic clock that costs ~4 ns a read where steady_clock costs ~29 ns (kvm-clock on the PVM
// guests: rdtsc plus the pvclock page), because it returns the time the kernel last kept at a
// tick. For "could this deadline have passed yet?" on hot loops: only a yes needs steady_clock.

#include <time.h>

#include <chrono>

namespace vessel::io {

class coarse_clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Reads the coarse clock's resolution once.
  coarse_clock() noexcept {
    timespec res{};
    available_ = ::clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0;
    // Two ticks: it trails by more than one when the kernel keeps time late.
    max_lag_ = 2 * (std::chrono::seconds{res.tv_sec} + std::chrono::nanoseconds{res.tv_nsec});
  }

  /// CLOCK_MONOTONIC_COARSE on steady_clock's time line (libstdc++'s steady_clock reads
  /// CLOCK_MONOTONIC, which the coarse clock trails: 1.0-5.4 ms with 4 ms ticks on the PVM guests).
  static time_point now() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return time_point{std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec}};
  }

  /// How far now() may trail steady_clock::now().
  std::chrono::nanoseconds max_lag() const noexcept { return max_lag_; }

  /// False only when `deadline` is certainly still ahead of steady_clock::now(); always true
  /// where the kernel has no coarse clock.
  bool may_have_passed(time_point deadline) const noexcept {
    return !available_ || now() + max_lag_ >= deadline;
  }

 private:
  bool available_ = false;
  std::chrono::nanoseconds max_lag_{};
};

}  // namespace vessel::io
