// A rank process restarted the way a launcher restarts it rejoins the mesh (issues 4 and 6): three
// restart_rank processes (tests/integration/restart_rank.cpp) exchange a round, rank 1 is
// SIGKILLed, and a new rank-1 process starts with the same VESSEL_* environment (plus
// VESSEL_INCARNATION=1, as vessel-run sets it). It publishes a new address; rank 2, which dials
// rank 1, must re-read it from the store (the old one refuses), rank 0 must accept the new
// incarnation; then both exchange messages with it in both directions and count the restart
// (runtime::peer_restarts). Every step waits for a line a rank prints, with a generous deadline.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/rank_launcher.hpp"

namespace vessel::test {
namespace {

using namespace std::chrono_literals;

/// The ranks of one scenario: each one's log file, pid and exit status.
class restart_job {
 public:
  restart_job(std::string transport, std::map<std::string, std::string> env)
      : transport_{std::move(transport)}, env_{std::move(env)} {
    char dir_template[] = "/tmp/vessel-restart-XXXXXX";
    dir_ = ::mkdtemp(dir_template);
    store_ = "127.0.0.1:" + std::to_string(free_loopback_port());
  }
  ~restart_job() {
    for (auto& p : procs_) {
      if (p.status == -1) {
        ::kill(p.pid, SIGKILL);
        ::waitpid(p.pid, nullptr, 0);
      }
      std::remove(p.log.c_str());
    }
    ::rmdir(dir_.c_str());
  }

  /// Starts rank `rank`; incarnation > 0 is a restart. Returns its index.
  std::size_t start(int rank, int incarnation) {
    proc p;
    p.rank = rank;
    p.log = dir_ + "/rank" + std::to_string(rank) + "-" + std::to_string(incarnation) + ".log";
    p.pid = ::fork();
    if (p.pid == 0) {
      const int fd = ::open(p.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("VESSEL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("VESSEL_WORLD_SIZE", "3", 1);
      ::setenv("VESSEL_STORE", store_.c_str(), 1);
      ::setenv("VESSEL_TOKEN", test_token(), 1);
      ::setenv("VESSEL_TRANSPORT", transport_.c_str(), 1);
      ::setenv("VESSEL_INCARNATION", std::to_string(incarnation).c_str(), 1);
      for (const auto& [k, v] : env_) ::setenv(k.c_str(), v.c_str(), 1);
      ::execl(RESTART_RANK_PATH, RESTART_RANK_PATH, static_cast<char*>(nullptr));
      std::perror("execl");
      std::_Exit(127);
    }
    procs_.push_back(std::move(p));
    return procs_.size() - 1;
  }

  std::string output(std::size_t i) const {
    std::ifstream in{procs_[i].log};
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  /// Waits until process `i` printed `line` (true), or exited or the deadline passed (false).
  bool wait_for_line(std::size_t i, const std::string& line, std::chrono::seconds limit = 180s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (output(i).find(line) != std::string::npos) return true;
      if (reap(i, false)) return output(i).find(line) != std::string::npos;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  void kill(std::size_t i) {
    ::kill(procs_[i].pid, SIGKILL);
    reap(i, true);
  }

  /// Waits for process `i` to exit (up to `limit`, then kills it); its exit status.
  int finish(std::size_t i, std::chrono::seconds limit = 180s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!reap(i, false)) {
      if (std::chrono::steady_clock::now() > until) {
        ::kill(procs_[i].pid, SIGKILL);
        reap(i, true);
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    return procs_[i].status;
  }

  std::string all_output() const {
    std::string s;
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      s += "---- rank " + std::to_string(procs_[i].rank) + " (process " + std::to_string(i) +
           "):\n" + output(i);
    }
    return s;
  }

 private:
  struct proc {
    int rank = 0;
    pid_t pid = -1;
    std::string log;
    int status = -1;  // -1: running
  };

  bool reap(std::size_t i, bool block) {
    proc& p = procs_[i];
    if (p.status != -1) return true;
    int st = 0;
    if (::waitpid(p.pid, &st, block ? 0 : WNOHANG) != p.pid) return false;
    p.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return true;
  }

  std::string transport_;
  std::map<std::string, std::string> env_;
  std::string dir_;
  std::string store_;
  std::vector<proc> procs_;
};

/// The scenario; `wait_down`: start the new process only once both survivors declared rank 1
/// down (their reconnect deadline passed), so that the down link must come back too.
void run_scenario(const std::string& transport, bool wait_down) {
  std::map<std::string, std::string> env;
  env["VESSEL_LOG"] = "warn,actors=info";  // the address refresh is an info line of the mesh
  // Short enough for the down case to happen quickly; without it the default (30 s) keeps the
  // survivors' links reconnecting for the whole restart.
  if (wait_down) env["VESSEL_RECONNECT_TIMEOUT_MS"] = "1500";
  restart_job job{transport, env};
  std::vector<std::size_t> first;
  for (int r = 0; r < 3; ++r) first.push_back(job.start(r, 0));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(job.wait_for_line(first[r], "rank " + std::to_string(r) + " ready"))
        << job.all_output();
  }
  job.kill(first[1]);
  if (wait_down) {
    for (int r : {0, 2}) {
      ASSERT_TRUE(job.wait_for_line(first[r], "rank " + std::to_string(r) + " saw rank 1 down"))
          << job.all_output();
    }
  }
  const std::size_t again = job.start(1, 1);
  EXPECT_EQ(job.finish(again), 0) << job.all_output();
  EXPECT_EQ(job.finish(first[0]), 0) << job.all_output();
  EXPECT_EQ(job.finish(first[2]), 0) << job.all_output();
  const std::string restarted = job.output(again);
  EXPECT_NE(restarted.find("rank 1 got the reply of rank 0"), std::string::npos) << restarted;
  EXPECT_NE(restarted.find("rank 1 got the reply of rank 2"), std::string::npos) << restarted;
  EXPECT_NE(restarted.find("OK rank 1 restarted"), std::string::npos) << restarted;
  for (int r : {0, 2}) {
    const std::string out = job.output(first[r]);
    const std::string p = "rank " + std::to_string(r);
    EXPECT_NE(out.find(p + " saw rank 1 restart (restarts 1)"), std::string::npos) << out;
    EXPECT_NE(out.find(p + " answered the new rank 1"), std::string::npos) << out;
    EXPECT_NE(out.find(p + " link to rank 1: restarts 1"), std::string::npos) << out;
    EXPECT_NE(out.find("OK " + p), std::string::npos) << out;
  }
  // Rank 2 dials rank 1 (the higher rank dials): it got there through the store, not by luck.
  const std::string dialler = job.output(first[2]);
  EXPECT_NE(dialler.find("mesh: rank 1 published a new address"), std::string::npos) << dialler;
}

TEST(rank_restart, a_killed_rank_restarted_rejoins_over_tcp) {
  run_scenario("tcp", false);
}

TEST(rank_restart, a_killed_rank_restarted_rejoins_over_shm) {
  run_scenario("shm", false);
}

TEST(rank_restart, a_rank_restarted_after_its_peers_declared_it_down_rejoins) {
  run_scenario("tcp", true);
}

}  // namespace
}  // namespace vessel::test
