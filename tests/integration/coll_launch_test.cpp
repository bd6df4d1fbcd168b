// collectives::communicator over real rank processes on loopback: every operation checked on
// every rank (coll_ranks): 1 to 4 ranks with every algorithm and four element types (about 4 s
// for 4 ranks under ASan), 5 ranks with the default algorithms, 6 to 8 ranks with the default
// algorithms and those shaped by the world size ("odd", see coll_ranks.cpp), over TCP for 6 and 8
// and shared memory for 7 (the harness gives every rank of a job one transport).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "tests/integration/rank_launcher.hpp"
#include "tests/integration/ss_kill.hpp"

namespace {

using vessel::test::launch_ranks;
using vessel::test::launch_result;
using vessel::test::launch_spec;
using namespace std::chrono_literals;

launch_spec coll_spec(int ranks, const std::string& mode) {
  launch_spec spec;
  spec.program = COLL_RANKS_PATH;
  spec.args = {mode};
  spec.ranks = ranks;
  spec.timeout = std::chrono::seconds{180};
  // Pulls on, whatever this machine's copy rates would choose (io/single_copy_probe.hpp).
  if (mode == "pull") spec.extra_env["VESSEL_PULL_BYTES"] = "262144";
  return spec;
}

void expect_ok(const launch_result& r, const std::string& mode) {
  EXPECT_FALSE(r.timed_out) << "ranks killed after the timeout";
  for (std::size_t i = 0; i < r.exit_codes.size(); ++i) {
    EXPECT_EQ(r.exit_codes[i], 0) << "rank " << i << " output:\n" << r.outputs[i];
    EXPECT_NE(r.outputs[i].find("OK rank " + std::to_string(i) + " coll " + mode),
              std::string::npos)
        << "rank " << i << ":\n"
        << r.outputs[i];
  }
}

void run_matrix(int ranks, const std::string& mode, const std::string& transport = "tcp") {
  launch_spec spec;
  spec.program = COLL_RANKS_PATH;
  spec.args = {mode};
  spec.ranks = ranks;
  spec.transport = transport;
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
// Issue 5's world sizes up to 8 as real processes, sized for CI: dev preset (Debug + ASan/UBSan)
// on the shared 2-core VM at load 6-10 (2026-11-30), 6 ranks 4.0-5.5 s, 7 ranks over shm 4.1-10.9
// s, 8 ranks 5.7-6.1 s.
TEST(CollectivesOverRanks, SixRanksSizeShapedAlgorithms) {
  run_matrix(6, "odd");
}
TEST(CollectivesOverRanks, SevenRanksSizeShapedAlgorithmsOverShm) {
  run_matrix(7, "odd", "shm");
}
TEST(CollectivesOverRanks, EightRanksSizeShapedAlgorithms) {
  run_matrix(8, "odd");
}

TEST(CollectivesOverRanks, FourRanksOverShmReadLargeChunksFromTheSendersMemory) {
  launch_spec spec = coll_spec(4, "pull");
  spec.transport = "shm";
  const launch_result r = launch_ranks(spec);
  expect_ok(r, "pull");
  for (const std::string& out : r.outputs) std::printf("%s", out.c_str());
}

TEST(CollectivesOverRanks, TwoRanksSelectByTheirLinksOverShmAndTcp) {
  for (const char* transport : {"shm", "tcp"}) {
    SCOPED_TRACE(transport);
    launch_spec spec = coll_spec(2, "links");
    spec.transport = transport;
    expect_ok(launch_ranks(spec), "links");
  }
}

TEST(CollectivesOverRanks, ARankThatCannotReadOtherProcessesGetsItsChunksAnyway) {
  launch_spec spec = coll_spec(4, "pull");
  spec.args.push_back("refuse");
  spec.transport = "shm";
  const launch_result r = launch_ranks(spec);
  expect_ok(r, "pull");
  EXPECT_NE(r.outputs[1].find("cannot read world rank"), std::string::npos) << r.outputs[1];
  bool told = false;  // by every rank that offered it a chunk; rank 0 does in the ring
  for (const std::string& out : r.outputs) {
    told |= out.find("world rank 1 cannot read this process's memory") != std::string::npos;
  }
  EXPECT_TRUE(told) << r.outputs[0];
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

TEST(CollectivesOverRanks, SplitDupAndInterleavedCommunicators) {
  // 4 ranks: dup, split by parity with reversed keys, a split that rank 0 opts out of, six
  // non-blocking collectives on world/dup/split in flight at once, waited in per-rank orders.
  const launch_result r = launch_ranks(coll_spec(4, "comms"));
  expect_ok(r, "comms");
}

TEST(CollectivesOverRanks, SplitOnFiveRanks) {
  const launch_result r = launch_ranks(coll_spec(5, "comms"));
  expect_ok(r, "comms");
}

TEST(CollectivesOverRanks, LinkDroppedMidCollectiveCompletesWithoutError) {
  // Restart-on-failure case 1, in process: rank 0 cuts its link to rank 1 while each large
  // allreduce is still in progress; every result must be right and no call may fail.
  const launch_result r = launch_ranks(coll_spec(3, "linkdrop"));
  expect_ok(r, "linkdrop");
  EXPECT_EQ(r.outputs[0].find("reconnects 0,"), std::string::npos) << r.outputs[0];
  std::printf("%s", r.outputs[0].c_str());
}

TEST(CollectivesOverRanks, LinkKilledFromOutsideWithSsCompletesWithoutError) {
  // Case 1 from outside: the kernel kills the ranks' sockets (ss -K) again and again until rank
  // 0 has seen its link reconnect and says so in the store; no sleep decides when.
  if (!vessel::test::ss_kill_available()) {
    GTEST_SKIP() << "ss -K unavailable (needs iproute2 and CONFIG_INET_DIAG_DESTROY)";
  }
  int kills = 0;
  const launch_result r = launch_ranks(coll_spec(2, "sscut"), [&](std::uint16_t store_port) {
    vessel::test::ss_kill_until(store_port, "coll/cut/done", 200ms, 400, kills);
  });
  expect_ok(r, "sscut");
  EXPECT_GT(kills, 0) << "ss -K never found the ranks' connection";
  std::printf("ss -K rounds that killed a connection: %d\n%s", kills, r.outputs[0].c_str());
}

TEST(CollectivesOverRanks, DeadRankFailsEverySurvivorNamingItThenShrink) {
  // Case 3: rank 3 of 4 SIGKILLs itself inside an allreduce and stays dead (the survivors start
  // theirs once its process is gone, so it cannot finish its part first). Each survivor's
  // allreduce fails with errc::rank_failed naming world rank 3 once the link is down (reconnect
  // deadline 1.5 s here, far below the collective's 120 s timeout); shrink() then gives the
  // three survivors a communicator whose allreduce is right.
  launch_spec spec = coll_spec(4, "rankdeath");
  spec.extra_env["VESSEL_RECONNECT_TIMEOUT_MS"] = "1500";
  const launch_result r = launch_ranks(spec);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_codes[3], 128 + 9) << r.outputs[3];
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.exit_codes[i], 0) << "rank " << i << ":\n" << r.outputs[i];
    EXPECT_NE(r.outputs[i].find("OK rank " + std::to_string(i) + " coll rankdeath"),
              std::string::npos)
        << r.outputs[i];
    EXPECT_NE(r.outputs[i].find("world rank(s) [3]"), std::string::npos) << r.outputs[i];
    EXPECT_NE(r.outputs[i].find("shrunk to 3 ranks"), std::string::npos) << r.outputs[i];
  }
}

}  // namespace
