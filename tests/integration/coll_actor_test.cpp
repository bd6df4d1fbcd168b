// The collective actor (collectives/collective_actor.hpp) over real rank processes on loopback
// (coll_actor_rank): every operation through the actor with all requests in flight at once, each
// answer equal to the blocking communicator's output (2 and 4 ranks over tcp, 3 over shm); a
// rank that dies for good makes the survivors' requests answer errc::rank_failed naming it, and
// the actor keeps answering.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "tests/integration/rank_launcher.hpp"

namespace {

using vessel::test::launch_ranks;
using vessel::test::launch_result;
using vessel::test::launch_spec;

launch_spec actor_spec(int ranks, const std::string& mode, const std::string& transport = "tcp") {
  launch_spec spec;
  spec.program = COLL_ACTOR_RANK_PATH;
  spec.args = {mode};
  spec.ranks = ranks;
  spec.transport = transport;
  spec.timeout = std::chrono::seconds{180};
  return spec;
}

void expect_ok(const launch_result& r, int ranks, const std::string& mode) {
  EXPECT_FALSE(r.timed_out) << "ranks killed after the timeout";
  for (int i = 0; i < ranks; ++i) {
    EXPECT_EQ(r.exit_codes[i], 0) << "rank " << i << " output:\n" << r.outputs[i];
    EXPECT_NE(r.outputs[i].find("OK rank " + std::to_string(i) + " coll_actor " + mode),
              std::string::npos)
        << "rank " << i << ":\n"
        << r.outputs[i];
  }
}

TEST(CollectiveActorOverRanks, TwoRanksEveryOperationMatchesTheBlockingCalls) {
  expect_ok(launch_ranks(actor_spec(2, "serve")), 2, "serve");
}

TEST(CollectiveActorOverRanks, FourRanksEveryOperationMatchesTheBlockingCalls) {
  expect_ok(launch_ranks(actor_spec(4, "serve")), 4, "serve");
}

TEST(CollectiveActorOverRanks, ThreeRanksOverShm) {
  expect_ok(launch_ranks(actor_spec(3, "serve", "shm")), 3, "serve");
}

TEST(CollectiveActorOverRanks, DeadRankIsAnsweredWithRankFailedAndTheActorKeepsServing) {
  launch_spec spec = actor_spec(3, "rankdeath");
  spec.extra_env["VESSEL_RECONNECT_TIMEOUT_MS"] = "1500";
  const launch_result r = launch_ranks(spec);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_codes[2], 128 + 9) << r.outputs[2];
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.exit_codes[i], 0) << "rank " << i << ":\n" << r.outputs[i];
    EXPECT_NE(r.outputs[i].find("OK rank " + std::to_string(i) + " coll_actor rankdeath"),
              std::string::npos)
        << r.outputs[i];
    EXPECT_NE(r.outputs[i].find("allreduce: vessel.collectives"), std::string::npos)
        << r.outputs[i];
  }
  std::printf("%s", r.outputs[0].c_str());
}

TEST(CollectiveActorOverRanks, LatencyOfSmallAllreducesBlockingAndThroughTheActor) {
  // A measurement, printed: the actor's answers must all come (no timing assertion).
  const launch_result r = launch_ranks(actor_spec(2, "latency"));
  expect_ok(r, 2, "latency");
  std::printf("%s%s", r.outputs[0].c_str(), r.outputs[1].c_str());
}

}  // namespace
