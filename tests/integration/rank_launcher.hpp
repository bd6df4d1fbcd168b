#pragma once
// Starts N rank processes on this host the way a launcher would (VESSEL_RANK, VESSEL_WORLD_SIZE,
// VESSEL_STORE on a free loopback port, VESSEL_TOKEN, VESSEL_TRANSPORT), collects each one's
// stdout+stderr and exit code, and kills them all when the timeout passes. Header-only: the
// integration tests share it.

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
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

namespace vessel::test {

struct launch_spec {
  std::string program;
  std::vector<std::string> args;
  int ranks = 2;
  std::string transport = "tcp";
  std::chrono::seconds timeout{120};
  std::map<std::string, std::string> extra_env;  ///< added to every rank's environment
  std::uint16_t store_port = 0;                  ///< 0: pick a free one
};

struct launch_result {
  std::vector<int> exit_codes;  ///< exit status, or 128 + signal
  std::vector<std::string> outputs;
  bool timed_out = false;
  std::uint16_t store_port = 0;
};

/// A loopback TCP port nobody listens on right now (bind to 0, read it, close).
inline std::uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// The token every test rank shares (32 bytes).
inline const char* test_token() {
  return "vessel-integration-test-token-0123456789";
}

/// Starts the ranks and returns once all ended (or were killed at the timeout).
/// `on_started` runs in the parent once every rank is forked (e.g. to attack a running rank).
template <class F>
launch_result launch_ranks(const launch_spec& spec, F&& on_started) {
  launch_result out;
  out.store_port = spec.store_port != 0 ? spec.store_port : free_loopback_port();
  const std::string store = "127.0.0.1:" + std::to_string(out.store_port);
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  char dir_template[] = "/tmp/vessel-ranks-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  for (int rank = 0; rank < spec.ranks; ++rank) {
    const std::string log = dir + "/rank" + std::to_string(rank) + ".log";
    logs.push_back(log);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("VESSEL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("VESSEL_WORLD_SIZE", std::to_string(spec.ranks).c_str(), 1);
      ::setenv("VESSEL_STORE", store.c_str(), 1);
      ::setenv("VESSEL_TOKEN", test_token(), 1);
      ::setenv("VESSEL_TRANSPORT", spec.transport.c_str(), 1);
      for (const auto& [k, v] : spec.extra_env) ::setenv(k.c_str(), v.c_str(), 1);
      // Launcher variables of an enclosing job must not override ours (they rank lower anyway).
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(spec.program.c_str()));
      for (const std::string& a : spec.args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(spec.program.c_str(), argv.data());
      std::perror("execv");
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  on_started(out.store_port);

  out.exit_codes.assign(pids.size(), -1);
  const auto deadline = std::chrono::steady_clock::now() + spec.timeout;
  std::size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != done) continue;
        out.exit_codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      out.timed_out = true;
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (out.exit_codes[i] == -1) ::kill(pids[i], SIGKILL);
      }
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (out.exit_codes[i] != -1) continue;
        ::waitpid(pids[i], &status, 0);
        out.exit_codes[i] = 128 + SIGKILL;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  for (const std::string& log : logs) {
    std::ifstream in{log};
    std::stringstream ss;
    ss << in.rdbuf();
    out.outputs.push_back(ss.str());
    std::remove(log.c_str());
  }
  ::rmdir(dir.c_str());
  return out;
}

inline launch_result launch_ranks(const launch_spec& spec) {
  return launch_ranks(spec, [](std::uint16_t) {});
}

}  // namespace vessel::test
