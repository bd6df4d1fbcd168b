#include "tools/vessel_run/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <list>
#include <optional>
#include <string>
#include <string_view>

#include "tools/vessel_run/line_prefixer.hpp"

namespace vessel::tools {
namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// The longest wait between restarts of one rank: backoff doubles up to here.
constexpr milliseconds max_restart_backoff{10'000};
/// After the last rank exited, how long to wait for its pipes to close (a grandchild may hold
/// them) before dropping them.
constexpr milliseconds drain_after_exit{500};

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    auto n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // stdout gone (EPIPE): the ranks go on, their output is lost
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

void say(const std::string& message) {
  write_all(STDERR_FILENO, "vessel-run: " + message + "\n");
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? "SIG" + std::string{abbrev} : "signal " + std::to_string(sig);
}

/// "exited with status 3" / "was killed by signal 9 (SIGKILL)".
std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  int sig = WTERMSIG(status);
  return "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct output_stream {
  int fd;
  int target;  ///< STDOUT_FILENO or STDERR_FILENO
  line_prefixer prefixer;
};

struct rank_state {
  pid_t pid = -1;  ///< also its process group id (each rank leads its own group)
  bool running = false;
  bool finished = false;  ///< exited for good (or will not be restarted)
  int incarnation = 0;
  int restarts = 0;
  std::optional<clock::time_point> restart_at;
};

class job_runner {
 public:
  explicit job_runner(const job_spec& job) : job_(job), ranks_(job.ranks.size()) {}

  int run() {
    sigset_t handled;
    sigemptyset(&handled);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
    sigprocmask(SIG_BLOCK, &handled, &original_mask_);
    std::signal(SIGPIPE, SIG_IGN);
    signal_fd_ = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd_ < 0) {
      say(std::string{"signalfd: "} + std::strerror(errno));
      return 1;
    }
    if (job_.timeout.count() > 0) timeout_at_ = clock::now() + job_.timeout;

    for (std::size_t i = 0; i < ranks_.size() && !stopping_; ++i) spawn(i);
    loop();
    // A stopped job leaves nothing behind: what a rank started in its group and that survived the
    // forwarded signal (sh runs background jobs with SIGINT ignored) goes now.
    if (stopping_) kill_all(SIGKILL);
    ::close(signal_fd_);
    sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
    return result_.value_or(0);
  }

 private:
  void loop() {
    std::optional<clock::time_point> drain_until;
    std::vector<pollfd> fds;
    for (;;) {
      bool any_alive = std::any_of(ranks_.begin(), ranks_.end(),
                                   [](const rank_state& r) { return r.running || r.restart_at; });
      if (!any_alive) {
        if (streams_.empty()) return;
        if (!drain_until) drain_until = clock::now() + drain_after_exit;
        if (clock::now() >= *drain_until) {
          for (auto& s : streams_) close_stream(s);
          streams_.clear();
          return;
        }
      }

      fds.clear();
      fds.push_back({signal_fd_, POLLIN, 0});
      for (auto& s : streams_) fds.push_back({s.fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), poll_timeout_ms(drain_until));

      // Output first, so that a rank's last lines come before the launcher's verdict on it.
      std::size_t index = 1;
      for (auto it = streams_.begin(); it != streams_.end(); ++index) {
        if (fds[index].revents != 0 && !read_stream(*it)) {
          close_stream(*it);
          it = streams_.erase(it);
        } else {
          ++it;
        }
      }
      if (fds[0].revents & POLLIN) read_signals();
      on_timers();
    }
  }

  int poll_timeout_ms(std::optional<clock::time_point> drain_until) const {
    std::optional<clock::time_point> next = drain_until;
    auto consider = [&](std::optional<clock::time_point> t) {
      if (t && (!next || *t < *next)) next = t;
    };
    consider(timeout_at_);
    consider(kill_at_);
    for (auto& r : ranks_) consider(r.restart_at);
    if (!next) return -1;
    auto wait = std::chrono::ceil<milliseconds>(*next - clock::now()).count();
    return static_cast<int>(std::clamp<long long>(wait, 0, 60'000));
  }

  /// False at end of stream.
  bool read_stream(output_stream& s) {
    char buffer[65536];
    auto n = ::read(s.fd, buffer, sizeof buffer);
    if (n < 0) return errno == EINTR || errno == EAGAIN;
    auto emit = [&](std::string_view line) { write_all(s.target, line); };
    if (n == 0) {
      s.prefixer.finish(emit);
      return false;
    }
    s.prefixer.feed(std::string_view{buffer, static_cast<std::size_t>(n)}, emit);
    return true;
  }

  void close_stream(output_stream& s) {
    s.prefixer.finish([&](std::string_view line) { write_all(s.target, line); });
    ::close(s.fd);
  }

  void read_signals() {
    signalfd_siginfo info;
    while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap();
      } else if (!stopping_) {
        say("got " + signal_name(sig) + ", stopping the job");
        result_ = 128 + sig;
        stop(sig);
      } else {
        say("got " + signal_name(sig) + " again, killing the job");
        kill_all(SIGKILL);
      }
    }
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (std::size_t i = 0; i < ranks_.size(); ++i) {
        if (ranks_[i].running && ranks_[i].pid == pid) on_exit(i, status);
      }
    }
  }

  void on_exit(std::size_t i, int status) {
    auto& r = ranks_[i];
    int rank = job_.ranks[i].rank;
    r.running = false;
    if (stopping_) {
      r.finished = true;
      return;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      r.finished = true;
      return;
    }
    if (r.restarts < job_.restart_max) {
      milliseconds delay = std::min<milliseconds>(
          max_restart_backoff, job_.restart_backoff * (1 << std::min(r.restarts, 20)));
      ++r.restarts;
      ++r.incarnation;
      r.restart_at = clock::now() + delay;
      say("rank " + std::to_string(rank) + " " + describe_status(status) + "; restart " +
          std::to_string(r.restarts) + " of " + std::to_string(job_.restart_max) + " in " +
          std::to_string(delay.count()) + " ms (incarnation " + std::to_string(r.incarnation) +
          ")");
      return;
    }
    r.finished = true;
    std::string gave_up =
        job_.restart_max > 0 ? " (gave up after " + std::to_string(r.restarts) + " restarts)" : "";
    say("rank " + std::to_string(rank) + " " + describe_status(status) + gave_up +
        "; stopping the job");
    result_ = exit_code_of(status);
    stop(SIGTERM);
  }

  void on_timers() {
    auto now = clock::now();
    if (timeout_at_ && now >= *timeout_at_ && !stopping_) {
      timeout_at_.reset();
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g",
                    static_cast<double>(job_.timeout.count()) / 1000);
      say(std::string{"--timeout of "} + seconds + " s reached; stopping the job");
      result_ = timeout_exit_status;
      stop(SIGTERM);
    }
    if (kill_at_ && now >= *kill_at_) {
      kill_at_.reset();
      for (std::size_t i = 0; i < ranks_.size(); ++i) {
        if (ranks_[i].running) {
          say("rank " + std::to_string(job_.ranks[i].rank) + " still running after " +
              std::to_string(job_.grace.count()) + " ms; sending SIGKILL");
        }
      }
      kill_all(SIGKILL);
    }
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].restart_at && now >= *ranks_[i].restart_at) {
        ranks_[i].restart_at.reset();
        spawn(i);
      }
    }
  }

  /// Sends `sig` to every rank (and what it started: each rank leads a process group), cancels
  /// pending restarts and arms SIGKILL for after the grace period.
  void stop(int sig) {
    stopping_ = true;
    timeout_at_.reset();
    for (auto& r : ranks_) {
      if (r.restart_at) r.finished = true;
      r.restart_at.reset();
    }
    kill_all(sig);
    kill_at_ = clock::now() + job_.grace;
  }

  void kill_all(int sig) {
    // Every group ever led by a rank of this job, even one whose leader already exited: a
    // grandchild (a shell script's `sleep`) may still be in it.
    for (auto& r : ranks_) {
      if (r.pid > 0) ::killpg(r.pid, sig);
    }
  }

  void spawn(std::size_t i) {
    const rank_spec& spec = job_.ranks[i];
    rank_state& r = ranks_[i];
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      fail_to_start(spec.rank, std::string{"pipe: "} + std::strerror(errno));
      return;
    }

    // Everything exec needs is built before fork: the child only calls async-signal-safe functions.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      std::string_view entry{*e};
      // A token inherited from the caller would win over this job's token file (actors/auth.hpp).
      if (entry.starts_with("VESSEL_TOKEN=")) continue;
      bool overridden = false;
      auto name = entry.substr(0, entry.find('='));
      for (auto& [key, value] : spec.env) overridden |= key == name;
      for (auto key :
           {"VESSEL_RANK", "VESSEL_WORLD_SIZE", "VESSEL_LOCAL_RANK", "VESSEL_INCARNATION"})
        overridden |= name == key;
      if (!overridden) env_strings.emplace_back(entry);
    }
    env_strings.push_back("VESSEL_RANK=" + std::to_string(spec.rank));
    env_strings.push_back("VESSEL_WORLD_SIZE=" + std::to_string(job_.ranks.size()));
    env_strings.push_back("VESSEL_LOCAL_RANK=" + std::to_string(spec.local_rank));
    env_strings.push_back("VESSEL_INCARNATION=" + std::to_string(r.incarnation));
    for (auto& [key, value] : spec.env) env_strings.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    std::vector<std::string> argv_strings = spec.wrapper;
    argv_strings.insert(argv_strings.end(), job_.program.begin(), job_.program.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    std::string exec_failed = "vessel-run: cannot run '" + argv_strings.front() + "': ";

    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) {
      fail_to_start(spec.rank, std::string{"fork: "} + std::strerror(errno));
      for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
      return;
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      // Dies with the launcher, even when the launcher is SIGKILLed and cannot tear down.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::signal(SIGPIPE, SIG_DFL);
      ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::execvpe(argv[0], argv.data(), envp.data());
      int e = errno;
      (void)!::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
      const char* why = ::strerror(e);
      (void)!::write(STDERR_FILENO, why, std::strlen(why));
      (void)!::write(STDERR_FILENO, "\n", 1);
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // both sides, so that a signal sent right after fork finds the group
    ::close(out[1]);
    ::close(err[1]);
    streams_.push_back({out[0], STDOUT_FILENO, line_prefixer{spec.rank}});
    streams_.push_back({err[0], STDERR_FILENO, line_prefixer{spec.rank}});
    r.pid = pid;
    r.running = true;
  }

  void fail_to_start(int rank, const std::string& why) {
    say("cannot start rank " + std::to_string(rank) + ": " + why + "; stopping the job");
    if (!result_) result_ = 1;
    stop(SIGTERM);
  }

  const job_spec& job_;
  std::vector<rank_state> ranks_;
  std::list<output_stream> streams_;
  sigset_t original_mask_{};
  int signal_fd_ = -1;
  bool stopping_ = false;
  std::optional<int> result_;
  std::optional<clock::time_point> timeout_at_;
  std::optional<clock::time_point> kill_at_;
};

}  // namespace

int run_job(const job_spec& job) {
  return job_runner{job}.run();
}

}  // namespace vessel::tools
