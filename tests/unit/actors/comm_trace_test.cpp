// VESSEL_TRACE for vessel::comm's own collectives (actors/comm.cpp, actors/trace_recorder.hpp):
// a barrier and an allreduce called by the user land in the process's recorder on the
// "vessel::comm" track with their operation, algorithm, type and sequence; finalize()'s barrier
// does not, and finalize() writes the rank's file. A one-rank world (every round is a no-op);
// the rounds' steps and peers on several ranks are checked in tests/integration/trace_test.cpp.
//
// Its own binary: VESSEL_TRACE is read once per process, at the recorder's first use, so it is
// set in main() before anything else runs.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/comm.hpp"
#include "actors/trace_recorder.hpp"

namespace vessel {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

fs::path trace_dir() {
  static const fs::path dir =
      fs::temp_directory_path() / ("vessel_comm_trace_" + std::to_string(::getpid()));
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in{p};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string_view algorithm_of(const actors::trace_event& e) {
  return {e.algorithm.data(), ::strnlen(e.algorithm.data(), e.algorithm.size())};
}

TEST(comm_trace, barrier_and_allreduce_are_recorded_on_the_comm_track_and_finalize_writes) {
  actors::trace_recorder* recorder = actors::trace_recorder::global();
  ASSERT_NE(recorder, nullptr) << "VESSEL_TRACE is set in main()";
  comm c = comm::init(actors::env_view::from_map({}));
  c.barrier(10s);
  std::vector<double> v(5, 1.5);
  c.allreduce(std::span<double>(v), reduce_op::max, 10s);
  std::vector<std::int32_t> w(3, 2);
  c.allreduce(std::span<std::int32_t>(w), reduce_op::sum);
  EXPECT_EQ(v, std::vector<double>(5, 1.5));

  const std::vector<actors::trace_event> events = recorder->events(0);
  ASSERT_EQ(events.size(), 3u) << "one event per call; a one-rank world has no rounds";
  for (const actors::trace_event& e : events) {
    EXPECT_FALSE(e.is_step);
    EXPECT_EQ(e.track, actors::comm_trace_track);
    EXPECT_EQ(e.api, "vessel::comm");
    EXPECT_EQ(e.comm_size, 1u);
    EXPECT_FALSE(e.error) << e.error.message();
    EXPECT_GE(e.duration_ns, 0);
  }
  EXPECT_EQ(events[0].operation, "barrier");
  EXPECT_EQ(algorithm_of(events[0]), "dissemination");
  EXPECT_TRUE(events[0].element_type.empty());
  EXPECT_EQ(events[1].operation, "allreduce");
  EXPECT_EQ(algorithm_of(events[1]), "recursive_doubling");
  EXPECT_EQ(events[1].element_type, "float64");
  EXPECT_EQ(events[1].reduction, "max");
  EXPECT_EQ(events[1].count, 5u);
  EXPECT_EQ(events[1].bytes, 40u);
  EXPECT_EQ(events[2].element_type, "int32");
  EXPECT_EQ(events[2].reduction, "sum");
  // Numbered as the calls are (the same order on every rank).
  EXPECT_LT(events[0].sequence, events[1].sequence);
  EXPECT_LT(events[1].sequence, events[2].sequence);

  c.finalize();
  EXPECT_EQ(recorder->events(0).size(), 3u) << "finalize()'s own barrier is not the user's";
  const fs::path file = trace_dir() / "out.rank0.json";
  ASSERT_TRUE(fs::exists(file)) << "finalize() writes the rank's file";
  const std::string text = slurp(file);
  EXPECT_NE(text.find("\"name\":\"barrier dissemination\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"name\":\"allreduce recursive_doubling\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"api\":\"vessel::comm\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"thread_name\",\"args\":{\"name\":\"vessel::comm\"}"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\"dtype\":\"float64\",\"reduce_op\":\"max\""), std::string::npos) << text;
  // One event per line: the layout vessel-run's textual merge relies on.
  std::istringstream lines{text};
  std::string line;
  int collective_lines = 0;
  while (std::getline(lines, line)) {
    if (line.find("\"cat\":\"collective\"") != std::string::npos) {
      ++collective_lines;
      EXPECT_EQ(line.rfind("{\"ph\":\"X\"", 0), 0u) << line;
    }
  }
  EXPECT_EQ(collective_lines, 3);
  if (std::system("command -v python3 > /dev/null 2>&1") == 0) {
    EXPECT_EQ(std::system(("python3 -m json.tool " + file.string() + " > /dev/null").c_str()), 0);
  }
}

TEST(comm_trace, a_failed_collective_is_recorded_with_its_error) {
  // A comm step that throws (a receive that times out) still leaves its event, with the outcome.
  actors::trace_recorder rec{(trace_dir() / "unused.json").string()};
  actors::trace_event h;
  h.rank = 3;
  h.track = actors::comm_trace_track;
  h.operation = "barrier";
  h.api = "vessel::comm";
  {
    actors::collective_trace t{rec, h, 2, 1'000};
    t.sent(0, 4, 1, 1'100);
    t.finish(actors::comm_errc::receive_timeout, 5'000);
  }
  const auto events = rec.events(3);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].error, make_error_code(actors::comm_errc::receive_timeout));
  EXPECT_TRUE(events[1].is_step);
  EXPECT_EQ(events[1].traffic.to.ranks[0], 4u);
  const std::string text = rec.json(3);
  EXPECT_EQ(text.find("\"dtype\""), std::string::npos) << "a barrier has no element type";
  EXPECT_EQ(text.find("\"communicator\""), std::string::npos) << text;
  EXPECT_EQ(text.find("\"outcome\":\"ok\""), std::string::npos) << text;
  ASSERT_TRUE(rec.write(3));
}

}  // namespace
}  // namespace vessel

int main(int argc, char** argv) {
  std::filesystem::remove_all(vessel::trace_dir());
  std::filesystem::create_directories(vessel::trace_dir());
  ::setenv("VESSEL_TRACE", (vessel::trace_dir() / "out.json").c_str(), 1);
  ::unsetenv("VESSEL_TRACE_MAX_EVENTS");
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  std::filesystem::remove_all(vessel::trace_dir());
  return rc;
}
