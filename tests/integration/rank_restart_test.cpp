// A rank process restarted the way a launcher restarts it rejoins the mesh (issues 4 and 6): three
// restart_rank processes (tests/integration/restart_rank.cpp) exchange a round, rank 1 is
// SIGKILLed, and a new rank-1 process starts with the same VESSEL_* environment (plus
// VESSEL_INCARNATION=1, as vessel-run sets it). It publishes a new address; rank 2, which dials
// rank 1, must re-read it from the store (the old one refuses), rank 0 must accept the new
// incarnation; then both exchange messages with it in both directions and count the restart
// (runtime::peer_restarts). Every step waits for a line a rank prints, with a generous deadline.

#include <signal.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/restart_job.hpp"

namespace vessel::test {
namespace {

/// The scenario; `wait_down`: start the new process only once both survivors declared rank 1
/// down (their reconnect deadline passed), so that the down link must come back too.
void run_scenario(const std::string& transport, bool wait_down) {
  std::map<std::string, std::string> env;
  env["VESSEL_LOG"] = "warn,actors=info";  // the address refresh is an info line of the mesh
  // Short enough for the down case to happen quickly; without it the default (30 s) keeps the
  // survivors' links reconnecting for the whole restart.
  if (wait_down) env["VESSEL_RECONNECT_TIMEOUT_MS"] = "1500";
  restart_job job{RESTART_RANK_PATH, {}, transport, env};
  std::vector<std::size_t> first;
  for (int r = 0; r < 3; ++r) first.push_back(job.start(r, 0));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(job.wait_for_line(first[r], "rank " + std::to_string(r) + " ready"))
        << job.all_output();
  }
  job.kill(first[1]);
  if (wait_down) {
    for (int r : {0, 2}) {
      ASSERT_TRUE(job.wait_for_line(first[r], "rank " + std::to_string(r) + " saw rank 1 down"))
          << job.all_output();
    }
  }
  const std::size_t again = job.start(1, 1);
  EXPECT_EQ(job.finish(again), 0) << job.all_output();
  EXPECT_EQ(job.finish(first[0]), 0) << job.all_output();
  EXPECT_EQ(job.finish(first[2]), 0) << job.all_output();
  const std::string restarted = job.output(again);
  EXPECT_NE(restarted.find("rank 1 got the reply of rank 0"), std::string::npos) << restarted;
  EXPECT_NE(restarted.find("rank 1 got the reply of rank 2"), std::string::npos) << restarted;
  EXPECT_NE(restarted.find("OK rank 1 restarted"), std::string::npos) << restarted;
  for (int r : {0, 2}) {
    const std::string out = job.output(first[r]);
    const std::string p = "rank " + std::to_string(r);
    EXPECT_NE(out.find(p + " saw rank 1 restart (restarts 1)"), std::string::npos) << out;
    EXPECT_NE(out.find(p + " answered the new rank 1"), std::string::npos) << out;
    EXPECT_NE(out.find(p + " link to rank 1: restarts 1"), std::string::npos) << out;
    EXPECT_NE(out.find("OK " + p), std::string::npos) << out;
  }
  // Rank 2 dials rank 1 (the higher rank dials): it got there through the store, not by luck.
  const std::string dialler = job.output(first[2]);
  EXPECT_NE(dialler.find("mesh: rank 1 published a new address"), std::string::npos) << dialler;
}

TEST(rank_restart, a_killed_rank_restarted_rejoins_over_tcp) {
  run_scenario("tcp", false);
}

TEST(rank_restart, a_killed_rank_restarted_rejoins_over_shm) {
  run_scenario("shm", false);
}

TEST(rank_restart, a_rank_restarted_after_its_peers_declared_it_down_rejoins) {
  run_scenario("tcp", true);
}

}  // namespace
}  // namespace vessel::test
