#include "actors/drive_budget.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;
using clock = drive_budget::clock;

const clock::time_point t0 = clock::time_point{} + 1h;

TEST(drive_budget, an_idle_wait_stops_after_the_spin_counted_from_the_first_look) {
  drive_budget b{200us, clock::time_point::max()};
  EXPECT_FALSE(b.started());
  EXPECT_TRUE(b.keep_going(t0, 7));
  EXPECT_TRUE(b.started());
  EXPECT_EQ(b.first_look(), t0);
  EXPECT_TRUE(b.keep_going(t0 + 199us, 7));
  EXPECT_FALSE(b.keep_going(t0 + 200us, 7)) << "no frame came: hand the loop back";
}

TEST(drive_budget, frames_arriving_in_each_window_keep_the_caller_driving) {
  drive_budget b{200us, clock::time_point::max()};
  ASSERT_TRUE(b.keep_going(t0, 0));
  std::uint64_t arrivals = 0;
  for (int window = 1; window <= 50; ++window) {  // 10 ms of a large message landing
    arrivals += 3;
    EXPECT_TRUE(b.keep_going(t0 + window * 200us, arrivals)) << "window " << window;
  }
  // The frames stop: one more whole window, then the caller lets go.
  const clock::time_point last = t0 + 50 * 200us;
  EXPECT_TRUE(b.keep_going(last + 150us, arrivals));
  EXPECT_FALSE(b.keep_going(last + 200us, arrivals));
  EXPECT_EQ(b.first_look(), t0) << "the first look stays the first";
}

TEST(drive_budget, the_deadline_ends_the_drive_even_while_frames_arrive) {
  drive_budget b{200us, t0 + 300us};
  ASSERT_TRUE(b.keep_going(t0, 0));
  EXPECT_TRUE(b.keep_going(t0 + 200us, 1)) << "a frame came: another window, up to the deadline";
  EXPECT_TRUE(b.keep_going(t0 + 299us, 1));
  EXPECT_FALSE(b.keep_going(t0 + 300us, 2));
}

TEST(drive_budget, a_timeout_counts_from_the_first_look_and_ends_the_drive_while_frames_arrive) {
  // A receive with a timeout while another peer streams to us: the frames keep the drive going,
  // but not past the receive's timeout.
  drive_budget b{200us, clock::time_point::max(), 1ms};
  ASSERT_TRUE(b.keep_going(t0, 0));
  std::uint64_t arrivals = 0;
  for (int window = 1; window < 5; ++window) {
    EXPECT_TRUE(b.keep_going(t0 + window * 200us, ++arrivals)) << "window " << window;
  }
  EXPECT_FALSE(b.keep_going(t0 + 1ms, ++arrivals));
  drive_budget sooner{200us, t0 + 300us, 1ms};
  ASSERT_TRUE(sooner.keep_going(t0, 0));
  EXPECT_TRUE(sooner.keep_going(t0 + 200us, 1));
  EXPECT_FALSE(sooner.keep_going(t0 + 300us, 2)) << "the fixed deadline came first";
}

TEST(drive_budget, a_deadline_sooner_than_the_spin_bounds_the_first_window) {
  drive_budget b{200us, t0 + 50us};
  EXPECT_TRUE(b.keep_going(t0, 0));
  EXPECT_FALSE(b.keep_going(t0 + 50us, 0));
  drive_budget past{200us, t0 - 1us};
  EXPECT_FALSE(past.keep_going(t0, 0)) << "a deadline already passed ends the drive at once";
}

}  // namespace
}  // namespace vessel::actors
