// VESSEL_TRACE end to end, as a user runs it: examples/ring_allreduce on 4 real ranks under
// vessel-run with VESSEL_TRACE set; vessel-run joins the rank files, and so does
// scripts/vessel-trace-merge. The merged file must hold
// every rank as a named process, the same collectives (by sequence number) on every rank with
// their algorithm, count and outcome, steps nested in each, and peers that are other ranks.
// vessel::comm's own barrier and allreduce are traced too, on a track of their own: the
// example's closing world.allreduce, and a program that uses only vessel::comm on 3 ranks
// (comm_trace_rank: the third rank folds into the recursive doubling).
// python3 reads the JSON (it is in scripts/setup-deps); the test skips where it is absent.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/integration/shell_capture.hpp"

namespace {

namespace fs = std::filesystem;

struct outcome {
  int status = -1;
  std::string out;
};

outcome shell(const std::string& command) {
  outcome o;
  o.out = vessel::test::run_capture(command + " 2>&1", o.status);
  return o;
}

/// The variables of a launcher around ctest would outrank vessel-run's own.
const char* clean_env =
    "env -u VESSEL_RANK -u VESSEL_WORLD_SIZE -u VESSEL_LOCAL_RANK -u VESSEL_STORE "
    "-u VESSEL_STORE_FILE -u VESSEL_TOKEN -u VESSEL_TOKEN_FILE -u VESSEL_INCARNATION "
    "-u VESSEL_TRANSPORT -u VESSEL_STATS -u VESSEL_TRACE_MAX_EVENTS ";

// What the merged trace must show, checked by a real JSON parser.
const char* check_merged = R"PY(
import json, sys
from decimal import Decimal
d = json.load(open(sys.argv[1]), parse_float=Decimal)  # vessel-run's join keeps epoch times
tol = Decimal("0.002")
ranks = int(sys.argv[2])
ev = d["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert names == {r: f"rank {r}" for r in range(ranks)}, names
xs = [e for e in ev if e["ph"] == "X"]
colls = [e for e in xs if e["cat"] == "collective" and "communicator" in e["args"]]
# The example's verdict (world.allreduce of vessel::comm), on its own track on every rank.
comm = [e for e in xs if e["cat"] == "collective" and "communicator" not in e["args"]]
assert sorted(e["pid"] for e in comm) == list(range(ranks)), comm
for c in comm:
    assert c["name"] == "allreduce recursive_doubling" and c["args"]["api"] == "vessel::comm", c
    assert c["args"]["dtype"] == "int32" and c["args"]["outcome"] == "ok", c
    assert c["tid"] not in {e["tid"] for e in colls}, c
per_rank = {}
for c in colls:
    a = c["args"]
    assert a["outcome"] == "ok", c
    assert c["name"] == a["operation"] + " " + a["algorithm"], c
    assert a["size"] == ranks and a["rank"] == c["pid"], c
    per_rank.setdefault(c["pid"], []).append((a["sequence"], a["operation"], a["algorithm"],
                                              a["count"], a["dtype"]))
assert sorted(per_rank) == list(range(ranks)), sorted(per_rank)
seen = sorted(per_rank[0])
for r in range(ranks):
    assert sorted(per_rank[r]) == seen, (r, sorted(per_rank[r]), seen)
ops = {s[1] for s in seen}
assert "allreduce" in ops and "barrier" in ops, ops
# 4 B .. 256 KiB by 4x: 9 sizes (1 .. 65536 floats), 1 warm-up + 2 timed allreduces each and a
# barrier before the timed ones.
counts = {s[3] for s in seen if s[1] == "allreduce"}
assert counts == {4 ** k for k in range(9)}, counts
assert sum(1 for s in seen if s[1] == "allreduce") == 27, seen
assert sum(1 for s in seen if s[1] == "barrier") == 9, seen
steps = [e for e in xs if e["cat"] == "step"]
for c in colls:
    inside = [s for s in steps if s["pid"] == c["pid"] and s["tid"] == c["tid"]
              and c["ts"] <= s["ts"] and s["ts"] + s["dur"] <= c["ts"] + c["dur"] + tol]
    assert inside, ("a collective without steps", c)
    end = c["ts"]
    for s in sorted(inside, key=lambda s: s["ts"]):
        assert s["ts"] >= end - tol, ("steps overlap", c, s)
        end = s["ts"] + s["dur"]
        peers = s["args"]["to"] + s["args"]["from"]
        assert peers and all(0 <= p < ranks and p != c["pid"] for p in peers), s
assert d["otherData"]["truncated"] is False
print(f"trace ok: {ranks} ranks, {len(colls)} collectives, {len(steps)} steps")
)PY";

TEST(trace, vessel_trace_on_four_ranks_merges_into_one_timeline_of_every_rank) {
  if (std::system("command -v python3 > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is absent (scripts/setup-deps installs it)";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("vessel_trace_it_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path out = dir / "out.json";

  const outcome run =
      shell(std::string{"timeout 400 "} + clean_env + "VESSEL_TRACE=" + out.string() + " " +
            VESSEL_RUN_PATH + " --timeout 300 -n 4 " + RING_ALLREDUCE_PATH +
            " --min-bytes 4 --max-bytes 256K --iters 2 --warmup 1");
  ASSERT_EQ(run.status, 0) << run.out;
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(fs::exists(dir / ("out.rank" + std::to_string(r) + ".json"))) << r << run.out;
  }
  // vessel-run joined them (tools/vessel_run/trace_merge.hpp).
  ASSERT_TRUE(fs::exists(out)) << run.out;
  EXPECT_NE(run.out.find("vessel-run: trace of 4 rank(s) in " + out.string()), std::string::npos)
      << run.out;
  const fs::path script = dir / "check.py";
  std::ofstream{script} << check_merged;
  const outcome joined = shell("python3 " + script.string() + " " + out.string() + " 4");
  EXPECT_EQ(joined.status, 0) << joined.out;
  EXPECT_NE(joined.out.find("trace ok: 4 ranks"), std::string::npos) << joined.out;

  // The script does the same for jobs vessel-run did not start (mpirun, srun).
  fs::remove(out);
  const outcome merge =
      shell("python3 " VESSEL_SOURCE_DIR "/scripts/vessel-trace-merge " + out.string());
  ASSERT_EQ(merge.status, 0) << merge.out;
  EXPECT_NE(merge.out.find("4 rank(s)"), std::string::npos) << merge.out;
  ASSERT_TRUE(fs::exists(out));

  const outcome check = shell("python3 " + script.string() + " " + out.string() + " 4");
  EXPECT_EQ(check.status, 0) << check.out;
  EXPECT_NE(check.out.find("trace ok: 4 ranks"), std::string::npos) << check.out;
  fs::remove_all(dir);
}

// What a program using only vessel::comm leaves: every rank's barrier and two allreduces, with
// their rounds as steps whose peers are the partners of dissemination and recursive doubling.
const char* check_comm = R"PY(
import json, sys
from decimal import Decimal
d = json.load(open(sys.argv[1]), parse_float=Decimal)
tol = Decimal("0.002")
ranks = int(sys.argv[2])
ev = d["traceEvents"]
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev
           if e["ph"] == "M" and e["name"] == "thread_name"}
xs = [e for e in ev if e["ph"] == "X"]
colls = [e for e in xs if e["cat"] == "collective"]
seen = {}
for c in colls:
    a = c["args"]
    assert a["api"] == "vessel::comm" and "communicator" not in a, c
    assert a["outcome"] == "ok" and a["size"] == ranks and a["rank"] == c["pid"], c
    assert threads[(c["pid"], c["tid"])] == "vessel::comm", threads
    seen.setdefault(c["pid"], []).append((a["sequence"], c["name"], a["count"]))
assert sorted(seen) == list(range(ranks)), seen
want = [("barrier dissemination", 0), ("allreduce recursive_doubling", 1),
        ("allreduce recursive_doubling", 300000)]
for r in range(ranks):
    got = sorted(seen[r])
    assert [(n, k) for _, n, k in got] == want, (r, got)  # finalize's barrier is not traced
    assert [s for s, _, _ in got] == [s for s, _, _ in sorted(seen[0])], (r, got)
steps = [e for e in xs if e["cat"] == "step"]
p2 = 1 << (ranks.bit_length() - 1)
for c in colls:
    r = c["pid"]
    inside = [s for s in steps if s["pid"] == r and s["tid"] == c["tid"]
              and c["ts"] <= s["ts"] and s["ts"] + s["dur"] <= c["ts"] + c["dur"] + tol]
    assert inside, ("a collective without steps", c)
    peers = set()
    for s in inside:
        peers |= set(s["args"]["to"]) | set(s["args"]["from"])
    if c["args"]["operation"] == "barrier":
        assert len(inside) == (ranks - 1).bit_length(), (c, inside)
        rounds = range(len(inside))
        want = {(r + (1 << k)) % ranks for k in rounds} | {(r - (1 << k)) % ranks for k in rounds}
        assert peers == want, (r, peers)
    elif r >= p2:  # folds into r - p2, gets the result back from it
        assert peers == {r - p2}, (r, peers)
    else:
        assert {r ^ (1 << k) for k in range(p2.bit_length() - 1)} <= peers, (r, peers)
    if c["args"]["count"] == 300000:
        sent = sum(s["args"]["bytes_sent"] for s in inside)
        assert sent >= 2400000 and sent == c["args"]["bytes_sent"], (c, sent)
print(f"comm trace ok: {ranks} ranks, {len(colls)} collectives, {len(steps)} steps")
)PY";

TEST(trace, vessel_comm_barrier_and_allreduce_are_traced_for_every_rank) {
  if (std::system("command -v python3 > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is absent (scripts/setup-deps installs it)";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("vessel_trace_comm_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path out = dir / "out.json";
  const outcome run = shell(std::string{"timeout 300 "} + clean_env + "VESSEL_TRACE=" +
                            out.string() + " " + VESSEL_RUN_PATH + " --timeout 240 -n 3 " +
                            COMM_TRACE_RANK_PATH);
  ASSERT_EQ(run.status, 0) << run.out;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(run.out.find("OK rank " + std::to_string(r) + " comm_trace"), std::string::npos)
        << run.out;
  }
  ASSERT_TRUE(fs::exists(out)) << run.out;
  const fs::path script = dir / "check.py";
  std::ofstream{script} << check_comm;
  const outcome check = shell("python3 " + script.string() + " " + out.string() + " 3");
  EXPECT_EQ(check.status, 0) << check.out;
  EXPECT_NE(check.out.find("comm trace ok: 3 ranks, 9 collectives"), std::string::npos)
      << check.out;
  fs::remove_all(dir);
}

TEST(trace, merge_names_the_missing_files) {
  if (std::system("command -v python3 > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is absent (scripts/setup-deps installs it)";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("vessel_trace_none_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const outcome merge = shell("python3 " VESSEL_SOURCE_DIR "/scripts/vessel-trace-merge " +
                              (dir / "out.json").string());
  EXPECT_EQ(merge.status, 1) << merge.out;
  EXPECT_NE(merge.out.find("out.rank0.json"), std::string::npos) << merge.out;
  fs::remove_all(dir);
}

}  // namespace
