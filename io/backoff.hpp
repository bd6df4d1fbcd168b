#pragma once
// Reconnect delays: exponential backoff with "full jitter" (AWS Architecture Blog, "Exponential
// Backoff And Jitter", 2015): attempt n waits a uniform random time in [0, min(cap, base * 2^n)].
// Full jitter spreads a herd of clients that lost the same server over the whole window, so they
// do not all come back in the same millisecond; the expected wait still doubles per attempt.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>

namespace vessel::io {

/// How a connection is re-dialled after a failure. Every key with its default.
struct reconnect_policy {
  std::chrono::nanoseconds initial_delay = std::chrono::milliseconds{10};  ///< base of attempt 0
  std::chrono::nanoseconds max_delay = std::chrono::seconds{5};  ///< cap on any one delay
  double multiplier = 2.0;       ///< growth of the window per attempt (>= 1)
  std::uint32_t max_attempts = 0;  ///< retries before giving up; 0 = never give up
  bool jitter = true;            ///< false: wait exactly the window (tests, single clients)
};

/// The delays of one reconnect sequence. Deterministic for a given seed (tests seed it; real
/// links seed it from std::random_device so that peers de-synchronise).
class backoff {
 public:
  explicit backoff(reconnect_policy policy = {}, std::uint64_t seed = std::random_device{}())
      : policy_{policy}, rng_{seed} {}

  /// The upper bound of attempt `attempt`'s delay: min(max_delay, initial_delay * multiplier^n),
  /// computed in floating point so that a large attempt count saturates instead of overflowing.
  std::chrono::nanoseconds window(std::uint32_t attempt) const noexcept {
    const double cap = static_cast<double>(policy_.max_delay.count());
    double w = static_cast<double>(policy_.initial_delay.count());
    for (std::uint32_t i = 0; i < attempt && w < cap; ++i) w *= std::max(policy_.multiplier, 1.0);
    return std::chrono::nanoseconds{static_cast<std::int64_t>(std::min(w, cap))};
  }

  /// The delay before the next attempt, or nullopt once max_attempts delays were handed out.
  std::optional<std::chrono::nanoseconds> next() noexcept {
    if (policy_.max_attempts != 0 && attempt_ >= policy_.max_attempts) return std::nullopt;
    const auto w = window(attempt_++);
    if (!policy_.jitter || w.count() <= 0) return w;
    // Full jitter: uniform in [0, w]. mt19937_64 output is specified by the standard, and the
    // mapping below is ours, so a seed gives the same delays with every standard library.
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;  // [0, 1)
    return std::chrono::nanoseconds{
        static_cast<std::int64_t>(u * static_cast<double>(w.count() + 1))};
  }

  /// Starts over after a successful connection.
  void reset() noexcept { attempt_ = 0; }

  /// Delays handed out since construction or the last reset().
  std::uint32_t attempts() const noexcept { return attempt_; }

  const reconnect_policy& policy() const noexcept { return policy_; }

 private:
  reconnect_policy policy_;
  std::mt19937_64 rng_;
  std::uint32_t attempt_ = 0;
};

}  // namespace vessel::io
