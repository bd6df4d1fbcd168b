#pragma once
// The process side of vessel-run: spawns the ranks of one job, prefixes their output, restarts
// ranks that die (when asked), forwards signals and tears the job down. Knows nothing of how
// ranks were chosen (options, topology): it gets one rank_spec per rank.

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace vessel::tools {

/// One rank to start.
struct rank_spec {
  int rank = 0;
  int local_rank = 0;
  /// Runs before the program: empty on this host, {"ip", "netns", "exec", NAME} inside a network
  /// namespace; an ssh launcher would be {"ssh", HOST, "--"} (and pass the env on its command
  /// line).
  std::vector<std::string> wrapper;
  /// Variables set in this rank's environment besides VESSEL_RANK/WORLD_SIZE/LOCAL_RANK/
  /// INCARNATION (which the launcher sets itself).
  std::vector<std::pair<std::string, std::string>> env;
};

struct job_spec {
  std::vector<rank_spec> ranks;
  std::vector<std::string> program;                ///< PROGRAM ARGS...
  int restart_max = 0;                             ///< restarts allowed per rank (--restart)
  std::chrono::milliseconds timeout{0};            ///< 0: none (--timeout)
  std::chrono::milliseconds grace{5000};           ///< TERM -> KILL delay when stopping the job
  std::chrono::milliseconds restart_backoff{100};  ///< first restart delay, doubled each time
};

/// Exit status of vessel-run when --timeout stopped the job (as timeout(1)).
inline constexpr int timeout_exit_status = 124;

/// Runs the job to its end and returns vessel-run's exit status: 0 when every rank exited 0; the
/// first failing rank's status (128 + signal for a signal) once the others are stopped; 128 +
/// signal when vessel-run got SIGINT/SIGTERM; timeout_exit_status for --timeout. Messages about
/// ranks go to stderr, prefixed "vessel-run: ".
int run_job(const job_spec& job);

}  // namespace vessel::tools
