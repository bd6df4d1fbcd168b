#pragma once
// The processes of one restart scenario, started the way a launcher starts them: each rank of a
// 3-rank job with its VESSEL_* environment (store, token, transport, incarnation) and its output in
// a log file, so that a test can kill one, start it again with a higher incarnation, wait for its
// lines or its exit, and read every log. Used by rank_restart_test and coll_restart_test.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/rank_launcher.hpp"

namespace vessel::test {

class restart_job {
 public:
  /// Every rank runs `program` with `args`, over `transport`, with `env` on top of the VESSEL_*
  /// variables the job sets.
  restart_job(std::string program, std::vector<std::string> args, std::string transport,
              std::map<std::string, std::string> env = {})
      : program_{std::move(program)},
        args_{std::move(args)},
        transport_{std::move(transport)},
        env_{std::move(env)} {
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
  restart_job(const restart_job&) = delete;
  restart_job& operator=(const restart_job&) = delete;

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
      std::vector<char*> argv{const_cast<char*>(program_.c_str())};
      for (auto& a : args_) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(program_.c_str(), argv.data());
      std::perror("execv");
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
  bool wait_for_line(std::size_t i, const std::string& line,
                     std::chrono::seconds limit = std::chrono::seconds{180}) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (output(i).find(line) != std::string::npos) return true;
      if (reap(i, false)) return output(i).find(line) != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
    return false;
  }

  void kill(std::size_t i) {
    ::kill(procs_[i].pid, SIGKILL);
    reap(i, true);
  }

  /// Waits for process `i` to exit (up to `limit`, then kills it); its exit status.
  int finish(std::size_t i, std::chrono::seconds limit = std::chrono::seconds{180}) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!reap(i, false)) {
      if (std::chrono::steady_clock::now() > until) {
        ::kill(procs_[i].pid, SIGKILL);
        reap(i, true);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
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

  std::string program_;
  std::vector<std::string> args_;
  std::string transport_;
  std::map<std::string, std::string> env_;
  std::string dir_;
  std::string store_;
  std::vector<proc> procs_;
};

}  // namespace vessel::test
