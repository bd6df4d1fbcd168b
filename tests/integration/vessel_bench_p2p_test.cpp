// `vessel-bench p2p` end to end with tiny sizes and iterations: it forks its own two rank
// processes per API (comm facade; rank actor from a scoped actor and from a hosted app actor),
// runs Open MPI's peer when mpirun is here, and writes a CSV whose shape these tests check
// (columns, one row per bench/size/metric, the peer's column, advantage = the ratio of the two
// values). No timing is asserted.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

struct csv_row {
  std::string bench, transport, ranks, size, metric, unit;
  double vessel = 0;
  std::string peer;
  double peer_value = 0;
  double advantage = 0;
};

struct bench_run {
  int status = -1;
  std::string output;
  std::string header;
  std::vector<csv_row> rows;
  std::vector<std::string> bad_lines;
};

bool mpirun_present() {
  return std::system("command -v mpirun > /dev/null 2>&1") == 0;
}

/// `vessel-bench p2p` over `transport` with `sizes`, its environment amended by `env` ("" or
/// "NAME=value ").
bench_run run_bench(const std::string& transport, const std::string& sizes = "8,64K",
                    const std::string& env = "") {
  bench_run r;
  static int invocation = 0;
  const auto dir =
      std::filesystem::temp_directory_path() /
      ("vessel-bench-p2p-test-" + std::to_string(::getpid()) + "-" + std::to_string(invocation++));
  std::filesystem::create_directories(dir);
  const auto csv = dir / (transport + ".csv");
  const auto log = dir / (transport + ".log");
  // By default 8 B: latency only; 64 KiB: latency and bandwidth.
  const std::string cmd = env + std::string{VESSEL_BENCH_PATH} + " p2p --transport " + transport +
                          " --sizes " + sizes + " --iterations 3 --runs 1 --csv " + csv.string() +
                          " > " + log.string() + " 2>&1";
  r.status = std::system(cmd.c_str());
  std::stringstream text;
  text << std::ifstream{log}.rdbuf();
  r.output = text.str();
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
    r.rows.push_back({f[0], f[1], f[2], f[3], f[4], f[5], std::stod(f[6]), f[7], std::stod(f[8]),
                      std::stod(f[9])});
  }
  std::filesystem::remove_all(dir);
  return r;
}

class vessel_bench_p2p : public ::testing::TestWithParam<std::string> {
 protected:
  static const bench_run& result(const std::string& transport) {
    static std::map<std::string, bench_run> cache;  // one bench invocation per transport
    auto it = cache.find(transport);
    if (it == cache.end()) it = cache.emplace(transport, run_bench(transport)).first;
    return it->second;
  }
};

TEST_P(vessel_bench_p2p, csv_has_one_row_per_api_size_and_metric) {
  const auto& r = result(GetParam());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.header,
            "bench,transport,ranks,size_bytes,metric,unit,vessel,peer,peer_value,advantage");
  EXPECT_TRUE(r.bad_lines.empty()) << r.bad_lines.front();
  std::set<std::tuple<std::string, std::string, std::string>> keys;
  for (const auto& row : r.rows) {
    EXPECT_TRUE(keys.emplace(row.bench, row.size, row.metric).second)
        << "duplicate row " << row.bench << " " << row.size << " " << row.metric;
    EXPECT_EQ(row.transport, GetParam());
    EXPECT_EQ(row.ranks, "2");
    EXPECT_EQ(row.unit, row.metric == "latency" ? "us" : "GB/s");
    EXPECT_GT(row.vessel, 0) << row.bench << " " << row.size << " " << row.metric;
  }
  const std::set<std::tuple<std::string, std::string, std::string>> want{
      {"p2p", "8", "latency"},
      {"p2p", "65536", "latency"},
      {"p2p", "65536", "bandwidth"},
      {"p2p.actor", "8", "latency"},
      {"p2p.actor", "65536", "latency"},
      {"p2p.actor", "65536", "bandwidth"},
      {"p2p.hosted", "8", "latency"},
      {"p2p.hosted", "65536", "latency"},
      {"p2p.hosted", "65536", "bandwidth"}};
  EXPECT_EQ(keys, want) << r.output;
  // The readable table names every way in.
  EXPECT_NE(r.output.find("p2p.actor"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("p2p.hosted"), std::string::npos) << r.output;
}

TEST_P(vessel_bench_p2p, open_mpi_peer_rows_carry_its_value_and_the_ratio) {
  if (!mpirun_present()) GTEST_SKIP() << "mpirun is absent (openmpi-bin): no peer rows to check";
  if (!std::filesystem::exists(std::filesystem::path{VESSEL_BENCH_PATH}.parent_path() /
                               "peer_mpi_p2p")) {
    GTEST_SKIP() << "peer_mpi_p2p was not built (libopenmpi-dev absent at configure time)";
  }
  const auto& r = result(GetParam());
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.rows.empty()) << r.output;
  const std::string peer = GetParam() == "shm" ? "ompi-vader" : "ompi-tcp";
  for (const auto& row : r.rows) {
    ASSERT_EQ(row.peer, peer) << r.output;
    ASSERT_GT(row.peer_value, 0);
    const double ratio =
        row.metric == "latency" ? row.peer_value / row.vessel : row.vessel / row.peer_value;
    // The CSV prints 6 significant digits of each value.
    EXPECT_NEAR(row.advantage, ratio, ratio * 1e-4) << row.bench << " " << row.size;
  }
}

// The actor loops send a message of several pool blocks (1 MiB each) as blocks filled before the
// loop, or, with VESSEL_BENCH_ACTOR_COPIES=1, copied into fresh blocks per message and out of
// each arrival; both walk the whole message and report it.
TEST(vessel_bench_p2p_actor_messages, span_several_blocks_prepared_or_copied) {
  for (const std::string env : {"", "VESSEL_BENCH_ACTOR_COPIES=1 "}) {
    const auto r = run_bench("shm", "3M", env);
    ASSERT_EQ(r.status, 0) << env << r.output;
    std::set<std::string> benches;
    for (const auto& row : r.rows) {
      EXPECT_EQ(row.size, "3145728") << env;
      EXPECT_EQ(row.metric, "bandwidth") << env;  // 3 MiB is past the latency sweep's 1 MiB
      EXPECT_GT(row.vessel, 0) << env << row.bench;
      benches.insert(row.bench);
    }
    EXPECT_EQ(benches, (std::set<std::string>{"p2p", "p2p.actor", "p2p.hosted"}))
        << env << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(transports, vessel_bench_p2p, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
