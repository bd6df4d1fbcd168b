// collectives/trace_recorder.hpp: the per-rank Chrome trace VESSEL_TRACE writes. Steps nest in
// their collective and follow each other on the track even when pipelined steps overlap in time,
// the bound drops whole collectives and the file says so, the JSON parses (python3's json module
// reads it back and checks the shape), and the file name carries the rank.

#include "collectives/trace_recorder.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace vessel::collectives {
namespace {

namespace fs = std::filesystem;

trace_event header(std::uint32_t rank, std::uint64_t sequence) {
  trace_event h;
  h.rank = rank;
  h.track = 3 * trace_lanes_per_communicator;
  h.communicator = 3;
  h.comm_rank = rank;
  h.comm_size = 4;
  h.sequence = sequence;
  h.count = 256;
  h.bytes = 1024;
  describe(h, collective_op::allreduce, dtype::float32, reduce_op::sum);
  const std::string_view name = "ring";
  std::copy(name.begin(), name.end(), h.algorithm.begin());
  return h;
}

/// A ring allreduce on rank 1 of 4: three reduce-scatter steps then three allgather steps, two
/// chunks each, step k+1's first chunk sent before step k's last arrives (pipelined).
void run_ring(trace_recorder& rec, std::uint32_t rank, std::uint64_t sequence, std::int64_t t0) {
  collective_trace t{rec, header(rank, sequence), 10, t0};
  std::int64_t now = t0;
  for (std::uint32_t step = 0; step < 6; ++step) {
    t.sent(step, 2, 64, now += 10);
    t.received(step, 0, 64, now += 100);
    t.sent(step + 1 < 6 ? step + 1 : step, 2, 64, now += 5);  // overlaps the next step
    t.received(step, 0, 64, now += 100);
  }
  t.finish({}, now + 7);
}

fs::path temp_dir() {
  fs::path d =
      fs::temp_directory_path() / ("vessel_trace_test_" + std::to_string(::getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in{p};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool have_python3() {
  return std::system("command -v python3 > /dev/null 2>&1") == 0;
}

TEST(trace_recorder, rank_goes_before_the_extension) {
  EXPECT_EQ(trace_recorder::rank_path("out.json", 2), "out.rank2.json");
  EXPECT_EQ(trace_recorder::rank_path("/tmp/run.d/out.json", 0), "/tmp/run.d/out.rank0.json");
  EXPECT_EQ(trace_recorder::rank_path("/tmp/run.d/trace", 3), "/tmp/run.d/trace.rank3.json");
  EXPECT_EQ(trace_recorder::rank_path("trace", 1), "trace.rank1.json");
  EXPECT_EQ(trace_recorder::rank_path("./.hidden", 1), "./.hidden.rank1.json");
}

TEST(trace_recorder, steps_nest_in_their_collective_in_order_without_overlap) {
  trace_recorder rec{::testing::TempDir() + "unused.json"};  // written at destruction
  run_ring(rec, 1, 7, 1'000'000);
  const auto events = rec.events(1);
  ASSERT_EQ(events.size(), 7u);  // the collective, then six steps
  const trace_event& whole = events[0];
  EXPECT_FALSE(whole.is_step);
  EXPECT_EQ(whole.start_ns, 1'000'000);
  EXPECT_EQ(whole.sequence, 7u);
  EXPECT_EQ(whole.traffic.chunks_sent, 12u);
  EXPECT_EQ(whole.traffic.chunks_received, 12u);
  EXPECT_EQ(whole.traffic.bytes_received, 12u * 64);
  ASSERT_EQ(whole.traffic.to.named, 1);
  EXPECT_EQ(whole.traffic.to.ranks[0], 2u);
  ASSERT_EQ(whole.traffic.from.named, 1);
  EXPECT_EQ(whole.traffic.from.ranks[0], 0u);
  std::int64_t cursor = whole.start_ns;
  for (std::size_t i = 1; i < events.size(); ++i) {
    const trace_event& s = events[i];
    EXPECT_TRUE(s.is_step);
    EXPECT_EQ(s.step, i - 1);
    EXPECT_EQ(s.track, whole.track);
    EXPECT_GE(s.start_ns, cursor) << "step " << s.step << " starts before the previous one ended";
    EXPECT_GT(s.duration_ns, 0);
    cursor = s.start_ns + s.duration_ns;
    EXPECT_LE(cursor, whole.start_ns + whole.duration_ns) << "step " << s.step << " ends outside";
    EXPECT_EQ(s.traffic.chunks_received, 2u);
    EXPECT_EQ(s.traffic.bytes_received, 128u);
  }
  // The last step ends with its last chunk; the collective a little later (its sends' hand-over).
  EXPECT_LT(cursor, whole.start_ns + whole.duration_ns);
}

TEST(trace_recorder, a_step_beyond_the_bound_shares_the_last_record) {
  trace_recorder rec{::testing::TempDir() + "unused.json"};  // written at destruction
  collective_trace t{rec, header(0, 0), 2, 0};
  t.received(0xffffffffu, 1, 8, 10);  // a broken peer's step number: no 4-billion-entry table
  t.sent(0, 1, 8, 20);
  t.finish({}, 30);
  const auto events = rec.events(0);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].step, 0u);
  EXPECT_EQ(events[2].step, collective_trace::max_steps - 1);
  EXPECT_EQ(events[2].start_ns, 20) << "laid after step 0, though its chunk came first";
}

TEST(trace_recorder, the_bound_drops_whole_collectives_and_the_file_says_so) {
  const fs::path dir = temp_dir();
  trace_recorder rec{(dir / "out.json").string(), 16};  // two ring collectives fit (7 events each)
  for (std::uint64_t k = 0; k < 5; ++k) run_ring(rec, 2, k, 1'000'000 + std::int64_t(k) * 10'000);
  const auto events = rec.events(2);
  EXPECT_EQ(events.size(), 14u);
  EXPECT_EQ(rec.dropped(2), 3u * 7);
  for (const trace_event& e : events) EXPECT_LT(e.sequence, 2u);  // no orphan steps of a third
  ASSERT_TRUE(rec.write(2));
  const std::string text = slurp(dir / "out.rank2.json");
  EXPECT_NE(text.find("\"dropped_events\":21"), std::string::npos) << text;
  EXPECT_NE(text.find("\"truncated\":true"), std::string::npos) << text;
  EXPECT_NE(text.find("trace truncated: 21 events dropped"), std::string::npos) << text;
  fs::remove_all(dir);
}

TEST(trace_recorder, each_rank_file_parses_as_a_chrome_trace_with_named_processes) {
  if (!have_python3()) GTEST_SKIP() << "python3 is absent (scripts/setup-deps installs it)";
  const fs::path dir = temp_dir();
  trace_recorder rec{(dir / "out.json").string()};
  run_ring(rec, 0, 0, 5'000'000);
  run_ring(rec, 1, 0, 5'000'100);
  {  // an overlapping collective on lane 1, and a failed one with a quote in its message
    trace_event h = header(1, 1);
    h.track += 1;
    describe(h, collective_op::broadcast, dtype::float32, reduce_op::sum);
    collective_trace t{rec, h, 4, 5'000'200};
    t.received(0, 0, 1 << 20, 5'000'900);
    t.finish(std::make_error_code(std::errc::timed_out), 5'001'000);
  }
  ASSERT_TRUE(rec.write(0));
  ASSERT_TRUE(rec.write(1));
  ASSERT_TRUE(fs::exists(dir / "out.rank0.json"));
  ASSERT_TRUE(fs::exists(dir / "out.rank1.json"));
  EXPECT_FALSE(fs::exists(dir / "out.json")) << "each rank writes only its own file";
  EXPECT_EQ(
      std::system(
          ("python3 -m json.tool " + (dir / "out.rank1.json").string() + " > /dev/null").c_str()),
      0);
  // The shape viewers rely on, read back by a real JSON parser; exact decimals (Decimal) so
  // that nesting is checked to the nanosecond.
  const std::string check = R"PY(
import json, sys
from decimal import Decimal
d = json.load(open(sys.argv[1]), parse_float=Decimal)
ev = d["traceEvents"]
meta = {(e["name"], e.get("tid")): e["args"] for e in ev if e["ph"] == "M"}
assert meta[("process_name", None)] == {"name": "rank 1"}, meta
assert meta[("thread_name", 192)] == {"name": "communicator 3"}, meta
assert meta[("thread_name", 193)] == {"name": "communicator 3 (overlapping 1)"}, meta
xs = [e for e in ev if e["ph"] == "X"]
assert all(e["pid"] == 1 for e in xs)
colls = [e for e in xs if e["cat"] == "collective"]
assert [c["name"] for c in colls] == ["allreduce ring", "broadcast ring"], colls
a = colls[0]["args"]
assert a["count"] == 256 and a["dtype"] == "float32" and a["bytes"] == 1024, a
assert a["sequence"] == 0 and a["communicator"] == 3 and a["outcome"] == "ok", a
assert colls[1]["args"]["root"] == 0 and colls[1]["args"]["outcome"] != "ok"
for c in colls:
    steps = [e for e in xs if e["cat"] == "step" and e["tid"] == c["tid"]]
    end = c["ts"]
    for s in steps:
        assert s["ts"] >= end and s["ts"] + s["dur"] <= c["ts"] + c["dur"], (c, s)
        end = s["ts"] + s["dur"]
steps = [e for e in xs if e["cat"] == "step" and e["tid"] == 192]
assert len(steps) == 6 and steps[0]["args"]["to"] == [2] and steps[0]["args"]["from"] == [0]
assert d["otherData"]["truncated"] is False
print("shape ok")
)PY";
  const fs::path script = dir / "check.py";
  std::ofstream{script} << check;
  EXPECT_EQ(
      std::system(("python3 " + script.string() + " " + (dir / "out.rank1.json").string()).c_str()),
      0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vessel::collectives
