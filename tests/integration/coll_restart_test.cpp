// Issue 5, case 2: a rank process dies in the middle of a collective and is restarted; the
// collective in flight is retried and completes with the right result everywhere. Three
// coll_restart_rank processes (tests/integration/coll_restart_rank.cpp) run a loop of checked
// allreduces with VESSEL_RESTARTS=1; rank 1 SIGKILLs itself inside iteration 3 (after its first
// chunk went out); the test waits for that exit and starts a new rank-1 process with the same
// environment plus VESSEL_INCARNATION=1, as vessel-run --restart does. Every step waits for an
// event (an exit, a line), never for a time.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/rank_launcher.hpp"

namespace vessel::test {
namespace {

using namespace std::chrono_literals;

constexpr int iterations = 6;
constexpr int kill_at = 3;

/// Three ranks of one scenario and the restarted rank 1: logs, pids, exit statuses.
class restart_job {
 public:
  explicit restart_job(std::string transport) : transport_{std::move(transport)} {
    char dir_template[] = "/tmp/vessel-coll-restart-XXXXXX";
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
      ::setenv("VESSEL_RESTARTS", "1", 1);
      ::setenv("VESSEL_LOG", "warn,collectives=info", 1);
      // The restart must land within the reconnect deadline, even on a loaded CI machine.
      ::setenv("VESSEL_RECONNECT_TIMEOUT_MS", "120000", 1);
      const std::string its = std::to_string(iterations), at = std::to_string(kill_at);
      ::execl(COLL_RESTART_RANK_PATH, COLL_RESTART_RANK_PATH, its.c_str(), at.c_str(),
              static_cast<char*>(nullptr));
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

  /// Waits for process `i` to exit (up to `limit`, then kills it); its exit status.
  int finish(std::size_t i, std::chrono::seconds limit = 240s) {
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
  std::string dir_;
  std::string store_;
  std::vector<proc> procs_;
};

void run_scenario(const std::string& transport) {
  restart_job job{transport};
  std::vector<std::size_t> first;
  for (int r = 0; r < 3; ++r) first.push_back(job.start(r, 0));
  // Rank 1 kills itself inside iteration kill_at; the launcher's part is to notice and restart.
  ASSERT_EQ(job.finish(first[1]), 128 + SIGKILL) << job.all_output();
  ASSERT_NE(job.output(first[1]).find("rank 1 dies in iteration " + std::to_string(kill_at)),
            std::string::npos)
      << job.all_output();
  const std::size_t again = job.start(1, 1);
  EXPECT_EQ(job.finish(again), 0) << job.all_output();
  EXPECT_EQ(job.finish(first[0]), 0) << job.all_output();
  EXPECT_EQ(job.finish(first[2]), 0) << job.all_output();

  const std::string restarted = job.output(again);
  EXPECT_NE(
      restarted.find("rank 1 restarted (incarnation 1) joins iteration " + std::to_string(kill_at)),
      std::string::npos)
      << restarted;
  for (int i = kill_at; i < iterations; ++i) {
    EXPECT_NE(restarted.find("rank 1 iteration " + std::to_string(i) + " ok"), std::string::npos)
        << restarted;
  }
  EXPECT_NE(restarted.find("OK rank 1"), std::string::npos) << restarted;
  for (int r : {0, 2}) {
    const std::string out = job.output(first[r]);
    const std::string p = "rank " + std::to_string(r);
    for (int i = 0; i < iterations; ++i) {
      EXPECT_NE(out.find(p + " iteration " + std::to_string(i) + " ok"), std::string::npos) << out;
    }
    // The survivor saw the restart and named the allreduce in flight for the new process.
    EXPECT_NE(out.find("rank 1 restarted (restart 1): it rejoins at collective #" +
                       std::to_string(kill_at) + " (epoch 1)"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("OK " + p), std::string::npos) << out;
  }
}

TEST(coll_restart, allreduce_in_flight_is_retried_when_the_rank_is_restarted_over_tcp) {
  run_scenario("tcp");
}

TEST(coll_restart, allreduce_in_flight_is_retried_when_the_rank_is_restarted_over_shm) {
  run_scenario("shm");
}

}  // namespace
}  // namespace vessel::test
