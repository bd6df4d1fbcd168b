// `vessel-bench coll` end to end with tiny sizes on 2 ranks: it starts its own rank processes
// (vessel-bench-coll-rank) and, where mpirun is here, Open MPI's peer twice (as it comes and
// with malloc told not to unmap), and writes a CSV whose shape these tests check: the columns,
// one row per (bench, size, metric, peer), busbw = algbw x the nccl-tests factor, advantage =
// the ratio of the two values. Without mpirun the peer column is "none". No timing is asserted.

#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "tools/vessel_bench/coll_plan.hpp"

namespace {

struct csv_row {
  std::string bench, transport;
  int ranks = 0;
  long size = 0;
  std::string metric, unit;
  double vessel = 0;
  std::string peer;
  double peer_value = 0;
  double advantage = 0;
};

struct bench_run {
  int status = -1;
  std::string output, header;
  std::vector<csv_row> rows;
  std::vector<std::string> bad_lines;
};

bool mpirun_present() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

/// `env`: assignments put before the command ("VAR=value ").
bench_run run_bench(const std::string& transport, const std::string& env = {}) {
  bench_run r;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("vessel-bench-coll-test-" + std::to_string(::getpid()) + "-" + transport);
  std::filesystem::create_directories(dir);
  const auto csv = dir / "coll.csv";
  const auto log = dir / "coll.log";
  const std::string cmd = env + std::string{VESSEL_BENCH_PATH} + " coll --transport " + transport +
                          " --ranks 2 --sizes 8,4K --iterations 3 --runs 2 --csv " + csv.string() +
                          " > " + log.string() + " 2>&1";
  r.status = std::system(cmd.c_str());
  std::ifstream lf{log};
  r.output.assign(std::istreambuf_iterator<char>{lf}, {});
  std::ifstream in{csv};
  std::getline(in, r.header);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::stringstream ss{line};
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    if (f.size() != 10) {
      r.bad_lines.push_back(line);
      continue;
    }
    r.rows.push_back({f[0], f[1], std::stoi(f[2]), std::stol(f[3]), f[4], f[5], std::stod(f[6]),
                      f[7], std::stod(f[8]), std::stod(f[9])});
  }
  std::filesystem::remove_all(dir);
  return r;
}

class vessel_bench_coll : public ::testing::TestWithParam<std::string> {};

TEST_P(vessel_bench_coll, writes_one_well_formed_row_per_bench_size_metric_and_peer) {
  const std::string transport = GetParam();
  const bench_run r = run_bench(transport);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.header, "bench,transport,ranks,size_bytes,metric,unit,vessel,peer,peer_value,advantage");
  EXPECT_TRUE(r.bad_lines.empty()) << r.bad_lines.front();

  std::set<std::string> peers;
  for (const csv_row& row : r.rows) peers.insert(row.peer);
  const bool with_mpi = peers.count("none") == 0;
  if (with_mpi) {
    const std::string base = transport == "tcp" ? "ompi_tcp" : "ompi_vader";
    EXPECT_EQ(peers, (std::set<std::string>{base, base + "_nounmap"}));
  } else {
    // No mpirun, no peer_mpi_coll (configured without Open MPI's headers), or an mpirun that
    // cannot start processes here: the peer column says none and stderr says why.
    EXPECT_EQ(peers, std::set<std::string>{"none"});
    const bool said_why = r.output.find("no Open MPI rows") != std::string::npos ||
                          r.output.find("no ompi_") != std::string::npos;
    EXPECT_TRUE(said_why) << r.output;
    if (!mpirun_present()) EXPECT_NE(r.output.find("mpirun not found"), std::string::npos);
  }

  // 4 operations x 2 sizes x 3 metrics per peer, each exactly once.
  std::map<std::tuple<std::string, long, std::string, std::string>, csv_row> seen;
  for (const csv_row& row : r.rows) {
    EXPECT_EQ(row.transport, transport);
    EXPECT_EQ(row.ranks, 2);
    EXPECT_TRUE(seen.emplace(std::tuple{row.bench, row.size, row.metric, row.peer}, row).second)
        << "duplicate row " << row.bench << " " << row.size << " " << row.metric;
    EXPECT_GT(row.vessel, 0) << row.bench << " " << row.size << " " << row.metric;
    EXPECT_EQ(row.unit, row.metric == "time" ? "us" : "GB/s");
    if (row.peer != "none") {
      ASSERT_GT(row.peer_value, 0);
      const double want = row.metric == "time" ? row.peer_value / row.vessel
                                               : row.vessel / row.peer_value;
      EXPECT_NEAR(row.advantage, want, want * 1e-3 + 1e-3);
    }
  }
  EXPECT_EQ(r.rows.size(), std::size_t{4 * 2 * 3} * peers.size());
  for (const std::string bench : {"allreduce", "broadcast", "allgather", "reduce_scatter"}) {
    for (const long size : {8L, 4096L}) {
      for (const std::string& peer : peers) {
        const auto time = seen.find({bench, size, "time", peer});
        const auto algbw = seen.find({bench, size, "algbw", peer});
        const auto busbw = seen.find({bench, size, "busbw", peer});
        ASSERT_NE(time, seen.end()) << bench << " " << size;
        ASSERT_NE(algbw, seen.end()) << bench << " " << size;
        ASSERT_NE(busbw, seen.end()) << bench << " " << size;
        // algbw = bytes / time (GB/s from us: bytes / us / 1e3).
        const double algbw_want = double(size) / time->second.vessel / 1e3;
        EXPECT_NEAR(algbw->second.vessel, algbw_want, algbw_want * 1e-3);
        // nccl-tests: 2(n-1)/n for allreduce, 1 for broadcast, (n-1)/n otherwise; n = 2.
        const double factor = bench == "allreduce" ? 1.0 : bench == "broadcast" ? 1.0 : 0.5;
        EXPECT_NEAR(busbw->second.vessel, algbw->second.vessel * factor,
                    algbw->second.vessel * 1e-3);
      }
    }
  }
  // The readable table names the algorithm vessel used for each size.
  EXPECT_NE(r.output.find("the algorithm vessel selected per size"), std::string::npos) << r.output;
}

// VESSEL_BENCH_COLL_OPS picks operations: both sides run only those (the peer's rows would be
// missing, or the run fail, if Open MPI's ranks ran the others), and a name that is no operation
// is refused before anything runs.
TEST(vessel_bench_coll_ops, runs_only_the_operations_named_and_refuses_unknown_ones) {
  const bench_run r = run_bench("shm", "VESSEL_BENCH_COLL_OPS=reduce_scatter,allreduce ");
  ASSERT_EQ(r.status, 0) << r.output;
  std::set<std::string> benches, peers;
  for (const csv_row& row : r.rows) {
    benches.insert(row.bench);
    peers.insert(row.peer);
  }
  EXPECT_EQ(benches, (std::set<std::string>{"allreduce", "reduce_scatter"})) << r.output;
  EXPECT_EQ(r.rows.size(), std::size_t{2 * 2 * 3} * peers.size());

  const bench_run bad = run_bench("shm", "VESSEL_BENCH_COLL_OPS=allreduce,alltoallw ");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("VESSEL_BENCH_COLL_OPS='allreduce,alltoallw'"), std::string::npos)
      << bad.output;
  EXPECT_TRUE(bad.rows.empty());
}

INSTANTIATE_TEST_SUITE_P(transports, vessel_bench_coll, ::testing::Values("tcp", "shm"));

}  // namespace

// The rank programs take plain byte counts (vessel-bench expands K/M): anything else must be
// refused whole, not read as its numeric prefix ("4K" as 4 bytes).
TEST(vessel_bench_coll_plan, takes_plain_byte_counts_and_refuses_anything_else) {
  EXPECT_EQ(vessel::bench::coll_plan("8,512,65536", 0, 2).sizes,
            (std::vector<std::size_t>{8, 512, 65536}));
  for (const char* bad : {"4K", "8,x", "0", "8,,9", "-8", "8 "}) {
    EXPECT_TRUE(vessel::bench::coll_plan(bad, 0, 2).sizes.empty()) << bad;
  }
}

TEST(vessel_bench_coll_plan, selects_the_named_operations_in_the_order_both_sides_run_them) {
  using vessel::bench::selected_coll_ops;
  using ops = std::vector<std::string_view>;
  EXPECT_EQ(selected_coll_ops(""), (ops{"allreduce", "broadcast", "allgather", "reduce_scatter"}));
  EXPECT_EQ(selected_coll_ops("broadcast,allreduce"), (ops{"allreduce", "broadcast"}));
  EXPECT_EQ(selected_coll_ops("allgather"), (ops{"allgather"}));
  for (const char* bad :
       {"allreduce,bogus", "allreduce,", ",allreduce", "Allreduce", " allreduce"}) {
    EXPECT_TRUE(selected_coll_ops(bad).empty()) << bad;
  }
}
