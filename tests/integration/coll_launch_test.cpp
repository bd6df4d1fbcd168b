// collectives::communicator over real rank processes on loopback: every operation checked on
// every rank (coll_ranks): 1 to 4 ranks with every algorithm and four element types (about 4 s
// for 4 ranks under ASan), 5 ranks with the default algorithms.

#include <gtest/gtest.h>

#include <string>

#include "tests/integration/rank_launcher.hpp"

namespace {

using vessel::test::launch_ranks;
using vessel::test::launch_result;
using vessel::test::launch_spec;

void run_matrix(int ranks, const std::string& mode) {
  launch_spec spec;
  spec.program = COLL_RANKS_PATH;
  spec.args = {mode};
  spec.ranks = ranks;
  spec.timeout = std::chrono::seconds{240};
  const launch_result r = launch_ranks(spec);
  EXPECT_FALSE(r.timed_out) << "ranks killed after the timeout";
  for (int i = 0; i < ranks; ++i) {
    EXPECT_EQ(r.exit_codes[i], 0) << "rank " << i << " output:\n" << r.outputs[i];
    EXPECT_NE(r.outputs[i].find("OK rank " + std::to_string(i) + " coll"), std::string::npos)
        << "rank " << i << ":\n"
        << r.outputs[i];
  }
}

TEST(CollectivesOverRanks, OneRankEveryAlgorithm) {
  run_matrix(1, "full");
}
TEST(CollectivesOverRanks, TwoRanksEveryAlgorithm) {
  run_matrix(2, "full");
}
TEST(CollectivesOverRanks, ThreeRanksEveryAlgorithm) {
  run_matrix(3, "full");
}
TEST(CollectivesOverRanks, FourRanksEveryAlgorithm) {
  run_matrix(4, "full");
}
TEST(CollectivesOverRanks, FiveRanksDefaultAlgorithms) {
  run_matrix(5, "quick");
}

TEST(CollectivesOverRanks, MissingRankTimesOutNamingIt) {
  launch_spec spec;
  spec.program = COLL_RANKS_PATH;
  spec.args = {"timeout"};
  spec.ranks = 2;
  spec.timeout = std::chrono::seconds{60};
  const launch_result r = launch_ranks(spec);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_codes[0], 0) << r.outputs[0];
  EXPECT_EQ(r.exit_codes[1], 0) << r.outputs[1];
  EXPECT_NE(r.outputs[0].find("allreduce #0"), std::string::npos) << r.outputs[0];
  EXPECT_NE(r.outputs[0].find("waiting for rank(s) [1]"), std::string::npos) << r.outputs[0];
}

}  // namespace
