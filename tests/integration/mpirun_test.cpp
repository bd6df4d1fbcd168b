// Under Open MPI's launcher: `mpirun -n 4 --oversubscribe --allow-run-as-root p2p_ranks ...`
// bootstraps every rank from OMPI_COMM_WORLD_* and finds rank 0's store through the file named by
// OMPI_MCA_ess_base_jobid (actors/store_rendezvous.hpp, store_file_path), with no VESSEL_STORE set.

#include <string>

#include <gtest/gtest.h>

#include "tests/integration/rank_launcher.hpp"
#include "tests/integration/shell_capture.hpp"

namespace vessel::test {
namespace {

TEST(mpirun, four_ranks_bootstrap_from_open_mpi_and_run_collectives_and_all_pairs) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found: install openmpi-bin (scripts/setup-deps)";
  // env -u: a VESSEL_RANK/VESSEL_STORE of the shell running ctest would outrank Open MPI's.
  const std::string prefix =
      std::string{
          "timeout 180 env -u VESSEL_RANK -u VESSEL_WORLD_SIZE -u VESSEL_STORE "
          "-u VESSEL_STORE_FILE -u VESSEL_TRANSPORT VESSEL_TOKEN="} +
      test_token() +
      // The transport is left to auto: four ranks on one host talk over shared memory.
      " VESSEL_LOG=info mpirun -n 4 --oversubscribe --allow-run-as-root " + "--mca btl self,tcp " +
      P2P_RANKS_PATH + " ";
  int status = 0;
  const std::string out = run_capture(prefix + "collectives 2>&1", status);
  if (mpirun_cannot_start(out, status, "OK rank")) {
    GTEST_SKIP() << "mpirun cannot start processes here:\n" << out;
  }
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(count(out, "up (Open MPI)"), 4u) << "every rank names Open MPI as its source:\n" << out;
  EXPECT_EQ(count(out, "OK rank"), 4u) << out;
  EXPECT_NE(out.find("published in"), std::string::npos) << "rank 0 publishes the store file:\n"
                                                         << out;

  const std::string pairs = run_capture(prefix + "allpairs 10 262144 21 2>&1", status);
  EXPECT_EQ(status, 0) << pairs;
  EXPECT_EQ(count(pairs, "OK rank"), 4u) << pairs;
}

}  // namespace
}  // namespace vessel::test
