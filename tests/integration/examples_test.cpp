// The examples as a user runs them: under vessel-run (4 ranks, ping_pong on 2) and under Open
// MPI's mpirun (skipped where mpirun is absent or cannot start processes), with small sizes so
// that they stay quick under ASan. What is asserted is what each example promises: every rank
// prints its OK line and exits 0, the tables are there, the SGD loss goes down and the weights
// are bit-identical on every rank, VESSEL_STATS=1 prints the per-link and per-collective tables.

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/shell_capture.hpp"

namespace {

using vessel::test::count;
using vessel::test::have_mpirun;

struct outcome {
  int status = -1;  ///< the shell's exit status of the whole command
  std::string out;
};

/// The variables of a launcher around ctest would outrank vessel-run's / mpirun's own.
const char* clean_env =
    "env -u VESSEL_RANK -u VESSEL_WORLD_SIZE -u VESSEL_LOCAL_RANK -u VESSEL_STORE "
    "-u VESSEL_STORE_FILE -u VESSEL_TOKEN -u VESSEL_TOKEN_FILE -u VESSEL_INCARNATION "
    "-u VESSEL_TRANSPORT -u VESSEL_STATS ";

outcome shell(const std::string& command) {
  outcome o;
  o.out = vessel::test::run_capture(command + " 2>&1", o.status);
  return o;
}

/// `vessel-run -n ranks` with a generous job timeout (a loaded 2-core CI machine under ASan).
outcome vessel_run(int ranks, const std::string& example, const std::string& args,
                   const std::string& env = "") {
  return shell(std::string{"timeout 400 "} + clean_env + env + " " + VESSEL_RUN_PATH +
               " --timeout 300 -n " + std::to_string(ranks) + " " + EXAMPLES_BIN_DIR + "/" +
               example + " " + args);
}

outcome mpirun(int ranks, const std::string& example, const std::string& args) {
  // Under mpirun the ranks need a token from outside; the store address comes from the file
  // Open MPI's job id names (actors/store_rendezvous.hpp, store_file_path).
  return shell(std::string{"timeout 400 "} + clean_env +
               "VESSEL_TOKEN=vessel-examples-test-token-0123456789 mpirun -n " +
               std::to_string(ranks) + " --oversubscribe --allow-run-as-root --mca btl self,tcp " +
               EXAMPLES_BIN_DIR + "/" + example + " " + args);
}

bool mpirun_cannot_start(const outcome& o) {
  return vessel::test::mpirun_cannot_start(o.out, o.status, "OK ");
}

/// The loss printed on each "step N  loss X" line of rank 0, in order.
std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  const std::regex line{R"(step +\d+ +loss ([0-9.eE+-]+))"};
  for (std::sregex_iterator it{out.begin(), out.end(), line}, end; it != end; ++it) {
    v.push_back(std::stod((*it)[1].str()));
  }
  return v;
}

void expect_sgd_trained(const outcome& o, int ranks) {
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_EQ(count(o.out, "OK data_parallel_sgd rank"), std::size_t(ranks)) << o.out;
  EXPECT_NE(o.out.find("weights=identical"), std::string::npos) << o.out;
  const auto l = losses(o.out);
  ASSERT_GE(l.size(), 3u) << "rank 0 prints the loss along the way:\n" << o.out;
  EXPECT_LT(l.back(), l.front() * 0.5) << "the loss goes down:\n" << o.out;
  // One weight hash on every rank: the OK lines all name the same one.
  const std::regex ok{R"(OK data_parallel_sgd rank \d+ weights ([0-9a-f]{16}))"};
  std::vector<std::string> hashes;
  for (std::sregex_iterator it{o.out.begin(), o.out.end(), ok}, end; it != end; ++it) {
    hashes.push_back((*it)[1].str());
  }
  ASSERT_EQ(hashes.size(), std::size_t(ranks)) << o.out;
  for (const auto& h : hashes) EXPECT_EQ(h, hashes.front()) << o.out;
}

const char* small_allreduce = "--min-bytes 4 --max-bytes 256K --iters 3 --warmup 1";
const char* small_sgd = "--samples 2048 --features 8 --steps 60 --lr 0.2";
const char* small_ping_pong = "--max-bytes 64K --iters 20";

TEST(examples, ping_pong_on_two_ranks_prints_latency_and_bandwidth) {
  const outcome o = vessel_run(2, "ping_pong", small_ping_pong);
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_EQ(count(o.out, "OK ping_pong rank"), 2u) << o.out;
  EXPECT_NE(o.out.find("latency us"), std::string::npos) << o.out;
  // 8 B, 64 B, 512 B, 4 KiB, 32 KiB: a row each.
  for (const char* size : {"8 B ", "64 B ", "512 B ", "4 KiB ", "32 KiB "}) {
    EXPECT_NE(o.out.find(std::string{"[0] "} + size), std::string::npos) << size << "\n" << o.out;
  }
}

TEST(examples, ping_pong_refuses_one_rank) {
  const outcome o = vessel_run(1, "ping_pong", small_ping_pong);
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("needs two ranks"), std::string::npos) << o.out;
}

TEST(examples, ring_allreduce_on_four_ranks_checks_every_size) {
  const outcome o = vessel_run(4, "ring_allreduce", small_allreduce);
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_EQ(count(o.out, "OK ring_allreduce rank"), 4u) << o.out;
  EXPECT_NE(o.out.find("busbw GB/s"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("WRONG"), std::string::npos) << o.out;
  // 4 B .. 256 KiB by 4x: 9 rows, each checked.
  EXPECT_EQ(count(o.out, " ok\n"), 9u) << o.out;
}

TEST(examples, ring_allreduce_with_a_forced_algorithm_names_it) {
  const outcome o = vessel_run(4, "ring_allreduce",
                               "--min-bytes 1K --max-bytes 64K --iters 2 --warmup 0 --algo ring");
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_EQ(count(o.out, "  ring  "), 4u) << "1 KiB, 4 KiB, 16 KiB, 64 KiB rows say ring:\n" << o.out;
}

TEST(examples, ring_allreduce_refuses_an_unknown_algorithm) {
  const outcome o = vessel_run(2, "ring_allreduce", "--max-bytes 4K --algo nonsense");
  EXPECT_NE(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("nonsense"), std::string::npos) << o.out;
}

TEST(examples, data_parallel_sgd_on_four_ranks_lowers_the_loss_with_identical_weights) {
  expect_sgd_trained(vessel_run(4, "data_parallel_sgd", small_sgd), 4);
}

TEST(examples, data_parallel_sgd_on_three_ranks_gives_the_same_data_uneven_shards) {
  expect_sgd_trained(vessel_run(3, "data_parallel_sgd", small_sgd), 3);
}

// The restarted rank 2 publishes a new address; rank 3, which dials it, re-reads it from the store
// once its re-dials of the old one fail (mesh: address refresh), and rank 2 rejoins with the weights
// of the lowest survivor, rank 0 (examples/README.md, the rejoin sequence).
TEST(examples, data_parallel_sgd_survives_a_killed_rank_under_restart) {
  // Rank 2 SIGKILLs itself at step 20; vessel-run restarts it; the survivors' allreduce fails
  // after --fail-timeout-ms, everyone regroups through rank 0, the new process gets the weights.
  const outcome o = vessel_run(
      4, "data_parallel_sgd",
      std::string{small_sgd} + " --kill-rank 2 --kill-step 20 --fail-timeout-ms 3000",
      "");
  // vessel_run() passes no --restart: run it again with one (the first shows the failure).
  EXPECT_NE(o.status, 0) << "without --restart the job ends with the killed rank:\n" << o.out;
  const outcome r = shell(std::string{"timeout 400 "} + clean_env + VESSEL_RUN_PATH +
                          " --timeout 300 --restart 2 -n 4 " + EXAMPLES_BIN_DIR +
                          "/data_parallel_sgd " + small_sgd +
                          " --kill-rank 2 --kill-step 20 --fail-timeout-ms 3000");
  expect_sgd_trained(r, 4);
  EXPECT_NE(r.out.find("[2] rank 2 restarted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[2] rank 2 rejoined at step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("regrouped at step"), std::string::npos) << r.out;
}

// Rank 0 too: vessel-run serves the store (not rank 0), the survivors regroup without it (the
// lowest survivor, rank 1, sends the weights), and the restarted rank 0 publishes its new address
// in that store, where ranks 1-3 find it once their re-dials of the old one fail.
TEST(examples, data_parallel_sgd_survives_a_killed_rank_0_under_restart) {
  const outcome r = shell(std::string{"timeout 400 "} + clean_env + VESSEL_RUN_PATH +
                          " --timeout 300 --restart 2 -n 4 " + EXAMPLES_BIN_DIR +
                          "/data_parallel_sgd " + small_sgd +
                          " --kill-rank 0 --kill-step 20 --fail-timeout-ms 3000");
  expect_sgd_trained(r, 4);
  EXPECT_NE(r.out.find("[0] rank 0: killing myself at step 20"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[0] rank 0 restarted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[0] rank 0 rejoined at step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("weights from rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1] rank 1: regrouped at step"), std::string::npos) << r.out;
  // Bit-identical to the weights of the same training without a failure.
  const outcome plain = vessel_run(4, "data_parallel_sgd", small_sgd);
  const std::regex hash{R"(weight hash ([0-9a-f]{16}))"};
  std::smatch with_kill, without;
  ASSERT_TRUE(std::regex_search(r.out, with_kill, hash)) << r.out;
  ASSERT_TRUE(std::regex_search(plain.out, without, hash)) << plain.out;
  EXPECT_EQ(with_kill[1].str(), without[1].str()) << r.out << plain.out;
}

TEST(examples, vessel_stats_prints_link_and_collective_tables_on_every_rank) {
  const outcome o = vessel_run(4, "ring_allreduce", "--max-bytes 16K --iters 2", "VESSEL_STATS=1");
  EXPECT_EQ(o.status, 0) << o.out;
  for (int r = 0; r < 4; ++r) {
    const std::string p = "[" + std::to_string(r) + "] ";
    EXPECT_NE(o.out.find(p + "rank " + std::to_string(r) + " link"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find(p + "rank " + std::to_string(r) + " collective"), std::string::npos)
        << o.out;
    EXPECT_NE(o.out.find(p + "allreduce "), std::string::npos) << o.out;
  }
  // Three peers per rank, every link up.
  EXPECT_EQ(count(o.out, "] -> "), 12u) << o.out;
  EXPECT_EQ(count(o.out, "  up  "), 12u) << o.out;
}

TEST(examples, under_mpirun_every_example_runs) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found: install openmpi-bin (scripts/setup-deps)";
  const outcome pp = mpirun(2, "ping_pong", small_ping_pong);
  if (mpirun_cannot_start(pp)) GTEST_SKIP() << "mpirun cannot start processes here:\n" << pp.out;
  EXPECT_EQ(pp.status, 0) << pp.out;
  EXPECT_EQ(count(pp.out, "OK ping_pong rank"), 2u) << pp.out;

  const outcome ar = mpirun(4, "ring_allreduce", small_allreduce);
  EXPECT_EQ(ar.status, 0) << ar.out;
  EXPECT_EQ(count(ar.out, "OK ring_allreduce rank"), 4u) << ar.out;

  expect_sgd_trained(mpirun(4, "data_parallel_sgd", small_sgd), 4);
}

}  // namespace
