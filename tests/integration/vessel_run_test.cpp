// vessel-run as a user runs it: a real launcher process, ranks that are small shell scripts.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct outcome {
  int status = -1;  ///< vessel-run's exit status (128 + signal if it died of one)
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class vessel_run_test : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vessel-run-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// Starts vessel-run with `args` (stdout/stderr to files in dir_), with `env` added.
  pid_t start(const std::vector<std::string>& args,
              const std::vector<std::pair<std::string, std::string>>& env = {}) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::FILE* out = std::freopen((dir_ / "out").c_str(), "w", stdout);
      std::FILE* err = std::freopen((dir_ / "err").c_str(), "w", stderr);
      if (!out || !err) ::_exit(99);
      std::vector<std::string> all{VESSEL_RUN_PATH};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(98);
    }
    return pid;
  }

  outcome finish(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    outcome o;
    o.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    o.out = slurp(dir_ / "out");
    o.err = slurp(dir_ / "err");
    return o;
  }

  outcome run(const std::vector<std::string>& args,
              const std::vector<std::pair<std::string, std::string>>& env = {}) {
    return finish(start(args, env));
  }

  fs::path dir_;
};

TEST_F(vessel_run_test, prefixes_every_line_with_its_rank_and_never_splits_one) {
  // Each rank writes its lines in two pieces with a pause between them, and long lines (4 KiB,
  // past PIPE_BUF) that the kernel may hand over in several reads.
  auto o = run({"-n", "4", "sh", "-c",
                "i=0; long=$(printf '%4096s' '' | tr ' ' x); while [ $i -lt 50 ]; do "
                "printf 'rank %s line %s ' $VESSEL_RANK $i; sleep 0.001; "
                "printf '%s\\n' $long; i=$((i+1)); done; printf 'no newline at the end'"});
  ASSERT_EQ(o.status, 0) << o.err;
  std::regex line_re{R"(\[(\d)\] rank (\d) line (\d+) (x{4096}))"};
  std::map<int, int> lines_per_rank;
  std::map<int, int> tails_per_rank;
  for (auto& line : lines_of(o.out)) {
    std::smatch m;
    if (std::regex_match(line, m, std::regex{R"(\[(\d)\] no newline at the end)"})) {
      ++tails_per_rank[std::stoi(m[1])];
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, line_re))
        << "a split or foreign line: " << line.substr(0, 80);
    EXPECT_EQ(m[1], m[2]) << "a rank's line carries another rank's prefix";
    EXPECT_EQ(std::stoi(m[3]), lines_per_rank[std::stoi(m[1])]++) << "lines out of order";
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(lines_per_rank[r], 50) << "rank " << r;
    EXPECT_EQ(tails_per_rank[r], 1) << "the last line without a newline of rank " << r;
  }
}

TEST_F(vessel_run_test, stderr_lines_are_prefixed_on_stderr) {
  auto o = run({"-n", "2", "sh", "-c", "echo to-err >&2; echo to-out"});
  ASSERT_EQ(o.status, 0);
  EXPECT_NE(o.err.find("[0] to-err\n"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("[1] to-err\n"), std::string::npos) << o.err;
  EXPECT_EQ(o.out.find("to-err"), std::string::npos);
  EXPECT_NE(o.out.find("[1] to-out\n"), std::string::npos) << o.out;
}

TEST_F(vessel_run_test, each_rank_gets_its_rank_store_and_a_private_token_file) {
  auto o = run({"-n", "3", "sh", "-c",
                "echo \"$VESSEL_RANK $VESSEL_WORLD_SIZE $VESSEL_LOCAL_RANK $VESSEL_INCARNATION "
                "$VESSEL_STORE $VESSEL_TOKEN_FILE $(stat -c %a \"$VESSEL_TOKEN_FILE\") "
                "$(stat -c %a \"$(dirname \"$VESSEL_TOKEN_FILE\")\") $(cat \"$VESSEL_TOKEN_FILE\") "
                "token=${VESSEL_TOKEN:-unset}\""},
               {{"VESSEL_TOKEN", "an-inherited-token-that-would-win"}, {"VESSEL_RANK", "7"}});
  ASSERT_EQ(o.status, 0) << o.err;
  std::regex re{
      R"(\[(\d)\] (\d) 3 (\d) 0 127\.0\.0\.1:(\d+) (\S+) 600 700 ([0-9a-f]{64}) token=unset)"};
  std::set<std::string> stores, files, tokens;
  auto lines = lines_of(o.out);
  ASSERT_EQ(lines.size(), 3u) << o.out;
  for (auto& line : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << line;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_EQ(m[2], m[3]) << "local rank on one host is the rank";
    EXPECT_GT(std::stoi(m[4]), 0);
    stores.insert(m[4]);
    files.insert(m[5]);
    tokens.insert(m[6]);
  }
  EXPECT_EQ(stores.size(), 1u) << "every rank must meet at the same store";
  EXPECT_EQ(tokens.size(), 1u) << "every rank must hold the same token";
  EXPECT_FALSE(fs::exists(*files.begin())) << "the token file outlives its job";

  auto again = run({"-n", "1", "sh", "-c", "cat \"$VESSEL_TOKEN_FILE\""});
  ASSERT_EQ(again.status, 0);
  EXPECT_EQ(again.out.find(*tokens.begin()), std::string::npos) << "a token reused across jobs";
}

TEST_F(vessel_run_test, exits_with_the_first_failing_rank_status_after_stopping_the_others) {
  auto o = run({"-n", "3", "--grace", "2", "sh", "-c",
                "if [ $VESSEL_RANK = 2 ]; then sleep 0.2; exit 3; fi; exec sleep 60"});
  EXPECT_EQ(o.status, 3);
  EXPECT_NE(o.err.find("vessel-run: rank 2 exited with status 3"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("SIGKILL"), std::string::npos) << "sleep stops on TERM, no KILL needed";
}

TEST_F(vessel_run_test, names_the_signal_that_killed_a_rank) {
  auto o = run(
      {"-n", "2", "sh", "-c", "if [ $VESSEL_RANK = 1 ]; then kill -SEGV $$; fi; exec sleep 60"});
  EXPECT_EQ(o.status, 128 + SIGSEGV);
  EXPECT_NE(o.err.find("rank 1 was killed by signal 11 (SIGSEGV)"), std::string::npos) << o.err;
}

TEST_F(vessel_run_test, kills_a_rank_that_ignores_term_after_the_grace_period) {
  // Rank 0 fails once rank 1 has said it ignores TERM.
  std::string ready = (dir_ / "ready").string();
  auto o = run({"-n", "2", "--grace", "0.3", "sh", "-c",
                "if [ $VESSEL_RANK = 0 ]; then while [ ! -e " + ready +
                    " ]; do sleep 0.01; done; exit 9; fi; trap '' TERM; touch " + ready +
                    "; while true; do sleep 0.05; done"});
  EXPECT_EQ(o.status, 9);
  EXPECT_NE(o.err.find("rank 1 still running after 300 ms; sending SIGKILL"), std::string::npos)
      << o.err;
}

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  // A zombie waiting for init (a container's init may be slow to reap) is gone too.
  std::ifstream stat{"/proc/" + std::to_string(pid) + "/stat"};
  std::string content{std::istreambuf_iterator<char>{stat}, {}};
  auto close = content.rfind(')');
  return close != std::string::npos && content.size() > close + 2 && content[close + 2] == 'Z';
}

TEST_F(vessel_run_test, sigint_stops_every_rank_and_what_they_started) {
  std::string pids = (dir_ / "pids").string();
  fs::create_directory(pids);
  // Each rank records itself and a background child of its own (a grandchild of vessel-run).
  pid_t launcher = start({"-n", "3", "sh", "-c",
                          "sleep 60 & echo $! > " + pids + "/child$VESSEL_RANK; echo $$ > " + pids +
                              "/rank$VESSEL_RANK; wait"});
  std::vector<pid_t> all;
  for (int waited = 0; waited < 1000; ++waited) {
    all.clear();
    for (auto& e : fs::directory_iterator{pids}) {
      auto text = slurp(e.path());
      if (!text.empty() && text.back() == '\n') all.push_back(std::stoi(text));
    }
    if (all.size() == 6) break;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(all.size(), 6u) << "the ranks did not start";
  ::kill(launcher, SIGINT);
  auto o = finish(launcher);
  EXPECT_EQ(o.status, 128 + SIGINT);
  EXPECT_NE(o.err.find("got SIGINT, stopping the job"), std::string::npos) << o.err;
  for (pid_t pid : all) {
    bool gone = false;
    for (int i = 0; i < 500 && !(gone = process_gone(pid)); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(gone) << "process " << pid << " outlived vessel-run";
  }
}

TEST_F(vessel_run_test, ranks_die_with_a_launcher_that_is_sigkilled) {
  // No teardown runs here: PR_SET_PDEATHSIG is what stops the ranks.
  std::string pids = (dir_ / "pids").string();
  fs::create_directory(pids);
  // TMPDIR: the token directory a killed launcher cannot remove goes with dir_.
  pid_t launcher =
      start({"-n", "2", "sh", "-c", "echo $$ > " + pids + "/rank$VESSEL_RANK; exec sleep 60"},
            {{"TMPDIR", dir_.string()}});
  std::vector<pid_t> all;
  for (int waited = 0; waited < 1000 && all.size() < 2; ++waited) {
    all.clear();
    for (auto& e : fs::directory_iterator{pids}) {
      auto text = slurp(e.path());
      if (!text.empty() && text.back() == '\n') all.push_back(std::stoi(text));
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(all.size(), 2u) << "the ranks did not start";
  ::kill(launcher, SIGKILL);
  EXPECT_EQ(finish(launcher).status, 128 + SIGKILL);
  for (pid_t pid : all) {
    bool gone = false;
    for (int i = 0; i < 500 && !(gone = process_gone(pid)); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(gone) << "rank process " << pid << " outlived a SIGKILLed vessel-run";
  }
}

TEST_F(vessel_run_test, restart_bumps_the_incarnation_and_gives_up_after_n) {
  auto o = run({"-n", "2", "--restart", "2", "sh", "-c",
                "if [ $VESSEL_RANK = 1 ]; then exec sleep 60; fi; "
                "echo incarnation $VESSEL_INCARNATION; exit 4"});
  EXPECT_EQ(o.status, 4);
  EXPECT_EQ(o.out, "[0] incarnation 0\n[0] incarnation 1\n[0] incarnation 2\n");
  EXPECT_NE(o.err.find("restart 1 of 2 in 100 ms (incarnation 1)"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("restart 2 of 2 in 200 ms (incarnation 2)"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("rank 0 exited with status 4 (gave up after 2 restarts)"), std::string::npos)
      << o.err;
}

TEST_F(vessel_run_test, a_restarted_rank_that_then_succeeds_ends_the_job_well) {
  auto o = run({"-n", "2", "--restart", "3", "sh", "-c",
                "if [ $VESSEL_RANK = 1 ] && [ $VESSEL_INCARNATION -lt 2 ]; then exit 1; fi; "
                "echo ok $VESSEL_INCARNATION"});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("[0] ok 0\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1] ok 2\n"), std::string::npos) << o.out;
}

// vessel-run serves the store, so rank 0's death loses nothing: its restart reads a key its first
// incarnation set, and rank 1's one connection to the store sees it (tests/integration/store_rank).
TEST_F(vessel_run_test, the_store_outlives_a_killed_rank_0) {
  auto o = run({"--timeout", "240", "-n", "2", "--restart", "1", STORE_RANK_PATH});
  EXPECT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("[0] rank 0 incarnation 0: killing myself\n"), std::string::npos) << o.out;
  EXPECT_NE(o.err.find("rank 0 was killed by signal 9 (SIGKILL); restart 1 of 1"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.out.find("[0] OK rank 0 incarnation 1 read test/before-kill: set by incarnation 0\n"),
            std::string::npos)
      << o.out << o.err;
  EXPECT_NE(o.out.find("[1] OK rank 1 saw rank 0 incarnation 1 on the same store connection\n"),
            std::string::npos)
      << o.out << o.err;
}

TEST_F(vessel_run_test, each_rank_is_told_the_store_is_served_for_it) {
  auto o = run({"-n", "2", "sh", "-c", "echo served=${VESSEL_STORE_SERVED:-unset}"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out.find("unset"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[0] served=1\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1] served=1\n"), std::string::npos) << o.out;
}

TEST_F(vessel_run_test, restart_n_tells_every_rank_that_restarts_can_happen) {
  ::unsetenv("VESSEL_RESTARTS");  // the user's own value would win
  auto o = run({"-n", "2", "--restart", "3", "sh", "-c", "echo restarts=${VESSEL_RESTARTS:-unset}"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("[0] restarts=3\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1] restarts=3\n"), std::string::npos) << o.out;
  o = run({"-n", "1", "sh", "-c", "echo restarts=${VESSEL_RESTARTS:-unset}"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("[0] restarts=unset\n"), std::string::npos) << o.out;
}

TEST_F(vessel_run_test, timeout_stops_the_job) {
  auto o = run({"-n", "2", "--timeout", "0.3", "sleep", "60"});
  EXPECT_EQ(o.status, 124);
  EXPECT_NE(o.err.find("--timeout of 0.3 s reached"), std::string::npos) << o.err;
}

TEST_F(vessel_run_test, a_program_that_cannot_run_is_reported) {
  auto o = run({"-n", "1", (dir_ / "no-such-program").string()});
  EXPECT_EQ(o.status, 127);
  EXPECT_NE(o.err.find("[0] vessel-run: cannot run"), std::string::npos) << o.err;
}

TEST_F(vessel_run_test, usage_errors_exit_2) {
  for (auto args :
       std::vector<std::vector<std::string>>{{},
                                             {"-n", "2"},
                                             {"-n", "0", "true"},
                                             {"-n", "x", "true"},
                                             {"--bogus", "true"},
                                             {"true"},
                                             {"-n", "2", "--topology", "t.toml", "true"},
                                             {"-n", "1", "--timeout", "-1", "true"},
                                             {"-n"}}) {
    auto o = run(args);
    EXPECT_EQ(o.status, 2) << ::testing::PrintToString(args);
    EXPECT_NE(o.err.find("usage: vessel-run"), std::string::npos) << o.err;
  }
}

TEST_F(vessel_run_test, a_topology_gives_each_rank_its_host_and_devices) {
  auto o = run({"--topology",
                std::string{VESSEL_SOURCE_DIR} + "/examples/topologies/uart-board.toml", "sh", "-c",
                "echo $VESSEL_RANK $VESSEL_WORLD_SIZE $VESSEL_LOCAL_RANK $VESSEL_HOST "
                "${VESSEL_STORE%:*} devices=$VESSEL_DEVICES"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("[0] 0 2 0 local 127.0.0.1 devices=\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1] 1 2 1 local 127.0.0.1 "
                       "devices=uart:port=/tmp/vessel-board,baud=115200,framing=reliable\n"),
            std::string::npos)
      << o.out;
}

TEST_F(vessel_run_test, a_bad_topology_is_a_usage_error_naming_file_line_and_key) {
  auto path = (dir_ / "bad.toml").string();
  std::ofstream{path} << "[[hosts]]\nname = \"a\"\naddress = \"127.0.0.1\"\nranks = 0\n";
  auto o = run({"--topology", path, "true"});
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find(path + ":4:9: hosts[0].ranks: must be an integer in [1, 4096], got 0"),
            std::string::npos)
      << o.err;
}

TEST_F(vessel_run_test, under_mpirun_it_execs_the_program_as_one_rank) {
  auto o = run({"-n", "4", "sh", "-c", "echo rank=${VESSEL_RANK:-none} ompi=$OMPI_COMM_WORLD_RANK"},
               {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(o.out, "rank=none ompi=3\n") << "no prefix, no VESSEL_RANK: mpirun owns the ranks";
}

}  // namespace
