// The actor examples (examples/parameter_server, examples/pipeline) as a user runs them: under
// vessel-run -n 4 and under Open MPI's mpirun -n 4 (skipped, with the reason, when mpirun is
// absent or cannot start processes here). Each example checks its own result and exits non-zero
// when it is wrong; the test also reads what it printed.

#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/integration/shell_capture.hpp"

namespace {

using vessel::test::count;
using vessel::test::have_mpirun;
using vessel::test::run_capture;

// A VESSEL_* or launcher variable of the shell running ctest would outrank the launcher's.
const std::string clean_env =
    "timeout 240 env -u VESSEL_RANK -u VESSEL_WORLD_SIZE -u VESSEL_STORE -u VESSEL_STORE_FILE "
    "-u VESSEL_TRANSPORT -u VESSEL_TOKEN -u VESSEL_TOKEN_FILE -u RANK -u WORLD_SIZE ";

std::string under_vessel_run(const std::string& program, const std::string& args,
                             int ranks = 4, const std::string& env = "") {
  return clean_env + env + " " + VESSEL_RUN_PATH + " -n " + std::to_string(ranks) + " " +
         program + " " + args + " 2>&1";
}

std::string under_mpirun(const std::string& program, const std::string& args) {
  return clean_env +
         "VESSEL_LOG=info VESSEL_TOKEN=actor-examples-test-token-0123456789abcdef "
         "mpirun -n 4 --oversubscribe --allow-run-as-root --mca btl self,tcp " +
         program + " " + args + " 2>&1";
}

bool mpirun_cannot_start(const std::string& out, int status) {
  return vessel::test::mpirun_cannot_start(out, status, "OK ");
}

void expect_parameter_server(const std::string& out, int status, bool dropped) {
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(count(out, "OK parameter_server rank "), 4u) << out;
  EXPECT_EQ(count(out, "values match"), 2u) << "two shards, each checked:\n" << out;
  EXPECT_EQ(count(out, "final parameters (512 values) match"), 4u) << out;
  EXPECT_EQ(count(out, "pulls saw own pushes: yes"), 4u) << out;
  if (dropped) {
    EXPECT_EQ(count(out, "cutting the connection to shard 0"), 3u) << out;
  }
}

void expect_pipeline(const std::string& out, int status, std::size_t ranks = 4) {
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(count(out, "OK pipeline rank "), ranks) << out;
  EXPECT_NE(out.find("consumed 600 items in order, values correct"), std::string::npos) << out;
  // The slow last stage (10 ms per item, slower than any stage's forwarding even under ASan)
  // holds stage 0 back: its in-flight count stays under the bound the queues add up to, and
  // some of its sends waited for room.
  EXPECT_NE(out.find(": kept); sends whose reply waited for room: "), std::string::npos) << out;
  const auto waited = out.find("waited for room: ");
  ASSERT_NE(waited, std::string::npos) << out;
  EXPECT_GT(std::stoull(out.substr(waited + 17)), 0u) << out;
}

const std::string ps_args = "--dims 512 --steps 8";
const std::string pipeline_args = "--items 600 --slow-ms 10 --report 10";

TEST(actor_examples, parameter_server_under_vessel_run) {
  int status = 0;
  const auto out = run_capture(under_vessel_run(PARAMETER_SERVER_PATH, ps_args), status);
  expect_parameter_server(out, status, false);
}

TEST(actor_examples, parameter_server_survives_dropped_connections_under_vessel_run) {
  int status = 0;
  const auto out = run_capture(
      under_vessel_run(PARAMETER_SERVER_PATH, ps_args + " --drop-connection"), status);
  expect_parameter_server(out, status, true);
}

TEST(actor_examples, pipeline_under_vessel_run) {
  int status = 0;
  const auto out = run_capture(under_vessel_run(PIPELINE_PATH, pipeline_args), status);
  expect_pipeline(out, status);
}

// Two ranks fit a host of two cores or more: each launched node binds to a core of its own, as
// mpirun would (VESSEL_BIND=auto), its reactor polls before it sleeps, and it says so at
// start-up; VESSEL_BIND=none binds nothing and nothing polls.
TEST(actor_examples, two_ranks_bind_to_a_core_each_unless_told_not_to) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one CPU: two ranks cannot fit";
  int status = 0;
  auto out = run_capture(
      under_vessel_run(PIPELINE_PATH, pipeline_args, 2, "VESSEL_LOG=actors=info"), status);
  expect_pipeline(out, status, 2);
  EXPECT_EQ(count(out, "rank 0: bound to core 0 of "), 1u) << out;
  EXPECT_EQ(count(out, "rank 1: bound to core 1 of "), 1u) << out;
  EXPECT_EQ(count(out, "the reactor polls 200 us before it sleeps"), 2u) << out;
  out = run_capture(
      under_vessel_run(PIPELINE_PATH, pipeline_args, 2, "VESSEL_LOG=actors=info VESSEL_BIND=none"),
      status);
  expect_pipeline(out, status, 2);
  EXPECT_EQ(count(out, "bound to core"), 0u) << out;
  EXPECT_EQ(count(out, "the reactor polls"), 0u) << "nothing spins on a shared core:\n" << out;
}

TEST(actor_examples, a_malformed_bind_policy_is_refused_naming_the_variable) {
  int status = 0;
  const auto out = run_capture(
      under_vessel_run(PIPELINE_PATH, pipeline_args, 2, "VESSEL_BIND=cores"), status);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("VESSEL_BIND='cores' is not one of auto, core, none"), std::string::npos)
      << out;
}

TEST(actor_examples, parameter_server_under_mpirun) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found: install openmpi-bin (scripts/setup-deps)";
  int status = 0;
  const auto out = run_capture(under_mpirun(PARAMETER_SERVER_PATH, ps_args), status);
  if (mpirun_cannot_start(out, status)) GTEST_SKIP() << "mpirun cannot start processes:\n" << out;
  expect_parameter_server(out, status, false);
  EXPECT_EQ(count(out, " from Open MPI"), 4u) << "every rank names Open MPI as its source:\n" << out;
}

TEST(actor_examples, pipeline_under_mpirun) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found: install openmpi-bin (scripts/setup-deps)";
  int status = 0;
  const auto out = run_capture(under_mpirun(PIPELINE_PATH, pipeline_args), status);
  if (mpirun_cannot_start(out, status)) GTEST_SKIP() << "mpirun cannot start processes:\n" << out;
  expect_pipeline(out, status);
}

}  // namespace
