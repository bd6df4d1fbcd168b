// The coarse clock stands in for steady_clock in "could this deadline have passed?" tests, which
// holds only if it reads steady_clock's time line, a little behind and never ahead.

#include <chrono>

#include <gtest/gtest.h>

#include "io/coarse_clock.hpp"

namespace vessel::io {
namespace {

using namespace std::chrono_literals;

TEST(coarse_clock, trails_steady_clock_by_at_most_its_lag_and_never_leads) {
  const coarse_clock clock;
  ASSERT_GT(clock.max_lag(), 0ns);
  for (int i = 0; i < 10'000; ++i) {
    // Bracketed: a thread descheduled between two reads (a loaded machine, ThreadSanitizer) would
    // otherwise count the time it was away as the coarse clock's lag (CI saw 8.13 ms against 8).
    const auto before = std::chrono::steady_clock::now();
    const auto coarse = coarse_clock::now();
    const auto after = std::chrono::steady_clock::now();
    ASSERT_LE(coarse, after) << "read " << i;
    ASSERT_LE(before - coarse, clock.max_lag()) << "read " << i;
  }
}

TEST(coarse_clock, a_passed_deadline_may_have_passed_and_a_distant_one_has_not) {
  const coarse_clock clock;
  const auto now = std::chrono::steady_clock::now();
  EXPECT_TRUE(clock.may_have_passed(now));
  EXPECT_TRUE(clock.may_have_passed(now - 1h));
  EXPECT_FALSE(clock.may_have_passed(now + clock.max_lag() + 1h));
}

}  // namespace
}  // namespace vessel::io
