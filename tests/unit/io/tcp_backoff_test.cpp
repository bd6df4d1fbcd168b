// io/backoff.hpp: exponential windows, full jitter inside them, determinism per seed, limits.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "io/backoff.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;

reconnect_policy policy(std::uint32_t max_attempts = 0, bool jitter = true) {
  reconnect_policy p;
  p.initial_delay = 10ms;
  p.max_delay = 1s;
  p.multiplier = 2.0;
  p.max_attempts = max_attempts;
  p.jitter = jitter;
  return p;
}

TEST(tcp_backoff, window_doubles_per_attempt_until_the_cap) {
  backoff b{policy(), 1};
  for (std::uint32_t n = 0; n < 7; ++n) EXPECT_EQ(b.window(n), 10ms * (1 << n)) << n;  // 640 ms
  EXPECT_EQ(b.window(7), 1s);  // 1280 ms capped
  EXPECT_EQ(b.window(1000), 1s);  // saturates, no overflow
}

TEST(tcp_backoff, without_jitter_delays_are_the_windows) {
  backoff b{policy(0, false), 1};
  std::vector<std::chrono::nanoseconds> got;
  for (int i = 0; i < 9; ++i) got.push_back(*b.next());
  const std::vector<std::chrono::nanoseconds> want{10ms, 20ms, 40ms, 80ms, 160ms,
                                                   320ms, 640ms, 1s, 1s};
  EXPECT_EQ(got, want);
}

TEST(tcp_backoff, jittered_delays_stay_within_zero_and_their_window) {
  backoff b{policy(), 42};
  const backoff ref{policy(), 0};
  for (std::uint32_t n = 0; n < 200; ++n) {
    const auto d = *b.next();
    EXPECT_GE(d.count(), 0);
    EXPECT_LE(d, ref.window(n)) << "attempt " << n;
    EXPECT_LE(d, 1s);
  }
}

TEST(tcp_backoff, jitter_is_deterministic_for_a_seed_and_differs_between_seeds) {
  backoff a{policy(), 7}, b{policy(), 7}, c{policy(), 8};
  int differing = 0;
  for (int i = 0; i < 20; ++i) {
    const auto da = *a.next(), db = *b.next(), dc = *c.next();
    EXPECT_EQ(da, db);
    differing += da != dc ? 1 : 0;
  }
  EXPECT_GT(differing, 15);
}

TEST(tcp_backoff, expected_delay_grows_exponentially) {
  // Full jitter keeps the mean at half the window: the mean doubles per attempt until the cap.
  constexpr int samples = 4000;
  double mean[5] = {};
  for (int s = 0; s < samples; ++s) {
    backoff b{policy(), static_cast<std::uint64_t>(s) + 1};
    for (double& m : mean) m += std::chrono::duration<double, std::milli>(*b.next()).count();
  }
  for (int n = 0; n < 5; ++n) {
    mean[n] /= samples;
    const double half_window = 5.0 * (1 << n);
    EXPECT_NEAR(mean[n], half_window, half_window * 0.1) << "attempt " << n;
  }
}

TEST(tcp_backoff, gives_up_after_max_attempts_and_reset_starts_over) {
  backoff b{policy(3, false), 1};
  EXPECT_EQ(*b.next(), 10ms);
  EXPECT_EQ(*b.next(), 20ms);
  EXPECT_EQ(*b.next(), 40ms);
  EXPECT_FALSE(b.next().has_value());
  EXPECT_EQ(b.attempts(), 3u);
  b.reset();
  EXPECT_EQ(*b.next(), 10ms);
}

}  // namespace
}  // namespace vessel::io
