// Issue 5, case 2: a rank process dies in the middle of a collective and is restarted; the
// collective in flight is retried and completes with the right result everywhere. Three
// coll_restart_rank processes (tests/integration/coll_restart_rank.cpp) run a loop of checked
// allreduces with VESSEL_RESTARTS=1; rank 1 SIGKILLs itself inside iteration 3 (after its first
// chunk went out); the test waits for that exit and starts a new rank-1 process with the same
// environment plus VESSEL_INCARNATION=1, as vessel-run --restart does. Every step waits for an
// event (an exit, a line), never for a time.

#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/restart_job.hpp"

namespace vessel::test {
namespace {

constexpr int iterations = 6;
constexpr int kill_at = 3;
constexpr std::chrono::seconds limit{240};  // per process, under ASan on a loaded machine

void run_scenario(const std::string& transport) {
  restart_job job{COLL_RESTART_RANK_PATH,
                  {std::to_string(iterations), std::to_string(kill_at)},
                  transport,
                  {{"VESSEL_RESTARTS", "1"},
                   {"VESSEL_LOG", "warn,collectives=info"},
                   // The restart must land within the reconnect deadline, even on a loaded CI
                   // machine.
                   {"VESSEL_RECONNECT_TIMEOUT_MS", "120000"}}};
  std::vector<std::size_t> first;
  for (int r = 0; r < 3; ++r) first.push_back(job.start(r, 0));
  // Rank 1 kills itself inside iteration kill_at; the launcher's part is to notice and restart.
  ASSERT_EQ(job.finish(first[1], limit), 128 + SIGKILL) << job.all_output();
  ASSERT_NE(job.output(first[1]).find("rank 1 dies in iteration " + std::to_string(kill_at)),
            std::string::npos)
      << job.all_output();
  const std::size_t again = job.start(1, 1);
  EXPECT_EQ(job.finish(again, limit), 0) << job.all_output();
  EXPECT_EQ(job.finish(first[0], limit), 0) << job.all_output();
  EXPECT_EQ(job.finish(first[2], limit), 0) << job.all_output();

  const std::string restarted = job.output(again);
  EXPECT_NE(
      restarted.find("rank 1 restarted (incarnation 1) joins iteration " + std::to_string(kill_at)),
      std::string::npos)
      << restarted;
  for (int i = kill_at; i < iterations; ++i) {
    EXPECT_NE(restarted.find("rank 1 iteration " + std::to_string(i) + " ok"), std::string::npos)
        << restarted;
  }
  EXPECT_NE(restarted.find("OK rank 1"), std::string::npos) << restarted;
  for (int r : {0, 2}) {
    const std::string out = job.output(first[r]);
    const std::string p = "rank " + std::to_string(r);
    for (int i = 0; i < iterations; ++i) {
      EXPECT_NE(out.find(p + " iteration " + std::to_string(i) + " ok"), std::string::npos) << out;
    }
    // The survivor saw the restart and named the allreduce in flight for the new process.
    EXPECT_NE(out.find("rank 1 restarted (restart 1): it rejoins at collective #" +
                       std::to_string(kill_at) + " (epoch 1)"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("OK " + p), std::string::npos) << out;
  }
}

TEST(coll_restart, allreduce_in_flight_is_retried_when_the_rank_is_restarted_over_tcp) {
  run_scenario("tcp");
}

TEST(coll_restart, allreduce_in_flight_is_retried_when_the_rank_is_restarted_over_shm) {
  run_scenario("shm");
}

}  // namespace
}  // namespace vessel::test
