// vessel-bench p2p --transport tcp|shm: point-to-point through the whole stack between two rank
// processes this tool forks (VESSEL_RANK/WORLD_SIZE/STORE/TOKEN/TRANSPORT, as vessel-run sets
// them), over three ways in: the blocking facade vessel::comm (rows "p2p"), vessel::node's rank
// actor from a scoped actor (rows "p2p.actor") and from an event-based app actor hosted on the
// node's reactor thread (rows "p2p.hosted"); against Open MPI's MPI_Send/MPI_Recv
// (bench/peers/mpi_p2p.cpp under `mpirun -n 2`, btl tcp or vader) run in the same invocation,
// interleaved: per run comm, MPI, actor, hosted, then the next run; medians over the runs. Without
// mpirun or peer_mpi_p2p (built when libopenmpi-dev is installed) the rows say peer "none".
// VESSEL_BENCH_P2P_PATHS picks a subset.

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/p2p.hpp"
#include "tools/vessel_bench/report.hpp"

namespace vessel::bench {

p2p_schedule p2p_schedule::from(const bench_options& opts) {
  constexpr std::size_t max_latency = std::size_t{1} << 20;
  constexpr std::size_t min_bandwidth = std::size_t{64} << 10;
  std::vector<std::size_t> lat, bw;
  if (opts.sizes.empty()) {
    for (std::size_t s = 8; s < max_latency; s *= 8) lat.push_back(s);
    lat.push_back(max_latency);
    for (std::size_t s = min_bandwidth; s <= (std::size_t{64} << 20); s *= 4) bw.push_back(s);
  } else {
    for (auto s : opts.sizes) {
      if (s <= max_latency) lat.push_back(s);
      if (s >= min_bandwidth) bw.push_back(s);
    }
  }
  p2p_schedule out;
  for (auto s : lat) {
    const std::size_t iters =
        s <= 4096 ? 2000 : std::max<std::size_t>(20, (std::size_t{32} << 20) / s);
    out.latency.push_back({s, opts.iterations ? opts.iterations : iters});
  }
  for (auto s : bw) {
    const std::size_t iters = std::max<std::size_t>(4, (std::size_t{256} << 20) / s);
    out.bandwidth.push_back({s, opts.iterations ? opts.iterations : iters});
  }
  return out;
}

std::string p2p_schedule::encode(const std::vector<p2p_point>& points) {
  if (points.empty()) return "-";
  std::string s;
  for (const auto& p : points) {
    if (!s.empty()) s += ',';
    s += std::to_string(p.size) + ':' + std::to_string(p.iters);
  }
  return s;
}

std::size_t p2p_schedule::max_size() const {
  std::size_t m = 1;
  for (const auto& p : latency) m = std::max(m, p.size);
  for (const auto& p : bandwidth) m = std::max(m, p.size);
  return m;
}

namespace {

using clock_type = std::chrono::steady_clock;
using samples = std::map<std::pair<std::string, std::size_t>, std::vector<double>>;

constexpr auto run_deadline = std::chrono::seconds{300};

/// Adds "latency <bytes> <value>" / "bandwidth <bytes> <value>" lines of `text` to `into`;
/// returns the other lines (a failing side's explanation).
std::string parse(const std::string& text, samples& into) {
  std::istringstream in{text};
  std::string line, rest;
  while (std::getline(in, line)) {
    std::istringstream l{line};
    std::string metric;
    std::size_t size = 0;
    double value = 0;
    if (l >> metric >> size >> value && (metric == "latency" || metric == "bandwidth"))
      into[{metric, size}].push_back(value);
    else
      rest += line + '\n';
  }
  return rest;
}

std::uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  return ok ? ntohs(a.sin_port) : 0;
}

/// Reads `fd` to its end, or until `deadline` (false then).
bool read_all(int fd, std::string& into, clock_type::time_point deadline) {
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    into.append(buf, static_cast<std::size_t>(n));
  }
}

/// Forks the two vessel ranks; rank 0's lines go into `into`. False (after saying why) if a rank
/// failed or the run passed its deadline.
bool run_vessel(p2p_path path, const char* transport, const p2p_schedule& schedule, samples& into) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  const std::uint16_t port = free_loopback_port();
  const std::string store = "127.0.0.1:" + std::to_string(port);
  // Each rank's stdout and stderr go to a log of its own, shown when the run fails: the table
  // stays readable, and a failure still says why.
  std::FILE* logs[2] = {std::tmpfile(), std::tmpfile()};
  std::fflush(nullptr);  // the children must not flush our buffers a second time
  const pid_t parent = ::getpid();
  pid_t pids[2] = {-1, -1};
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = ::fork();
    if (pids[rank] < 0) break;
    if (pids[rank] != 0) continue;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // an interrupted bench leaves no rank behind
    if (::getppid() != parent) std::_Exit(1);
    ::close(fds[0]);
    if (logs[rank] != nullptr) {
      ::dup2(::fileno(logs[rank]), STDOUT_FILENO);
      ::dup2(::fileno(logs[rank]), STDERR_FILENO);
    }
    ::setenv("VESSEL_RANK", rank == 0 ? "0" : "1", 1);
    ::setenv("VESSEL_WORLD_SIZE", "2", 1);
    ::setenv("VESSEL_STORE", store.c_str(), 1);
    ::setenv("VESSEL_TRANSPORT", transport, 1);
    if (std::getenv("VESSEL_TOKEN") == nullptr && std::getenv("VESSEL_TOKEN_FILE") == nullptr)
      ::setenv("VESSEL_TOKEN", "vessel-bench-p2p-token-0123456789abcdef", 1);
    int rc = 0;
    try {
      run_p2p_rank(path, schedule, fds[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "vessel-bench p2p (rank %d): %s\n", rank, e.what());
      rc = 1;
    }
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  ::close(fds[1]);
  std::string text;
  const bool in_time = read_all(fds[0], text, clock_type::now() + run_deadline);
  ::close(fds[0]);
  bool ok = in_time;
  for (pid_t pid : pids) {
    if (pid < 0) {
      ok = false;
      continue;
    }
    if (!in_time) ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!in_time)
    std::fprintf(stderr, "vessel-bench p2p: the ranks ran past %llds\n",
                 static_cast<long long>(run_deadline.count()));
  for (int rank = 0; rank < 2; ++rank) {
    if (logs[rank] == nullptr) continue;
    if (!ok) {
      std::rewind(logs[rank]);
      char line[512];
      while (std::fgets(line, sizeof line, logs[rank]) != nullptr)
        std::fprintf(stderr, "  rank %d: %s", rank, line);
    }
    std::fclose(logs[rank]);
  }
  parse(text, into);
  return ok;
}

/// How to run the peer, or nothing (after saying why) when Open MPI is not here.
std::optional<std::string> mpi_command(const char* transport) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto peer = self.parent_path() / "peer_mpi_p2p";
  if (ec || !std::filesystem::exists(peer, ec)) {
    std::fprintf(stderr,
                 "vessel-bench p2p: no %s (built when libopenmpi-dev is installed): "
                 "vessel only\n",
                 peer.c_str());
    return std::nullopt;
  }
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    std::fprintf(stderr, "vessel-bench p2p: no mpirun in PATH (openmpi-bin): vessel only\n");
    return std::nullopt;
  }
  const std::string btl = std::string{transport} == "shm"
                              ? "--mca btl self,vader"
                              : "--mca btl self,tcp --mca btl_tcp_if_include lo";
  return "mpirun -n 2 --oversubscribe --allow-run-as-root " + btl + " " + peer.string();
}

bool run_mpi(const std::string& command, const p2p_schedule& schedule, samples& into) {
  const std::string cmd = command + " 1 " + p2p_schedule::encode(schedule.latency) + " " +
                          p2p_schedule::encode(schedule.bandwidth) + " 2>&1";
  std::fflush(nullptr);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  std::string text;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = ::pclose(p);
  const std::string rest = parse(text, into);
  if (status != 0)
    std::fprintf(stderr, "vessel-bench p2p: %s failed:\n%s", cmd.c_str(), rest.c_str());
  return status == 0;
}

void add_rows(report& out, const char* bench, const char* transport, const samples& vessel,
              const samples& peer, const std::string& peer_name, bool verbose) {
  for (const auto& [key, values] : vessel) {
    const auto it = peer.find(key);
    const bool have_peer = it != peer.end() && !it->second.empty();
    if (verbose) {
      std::fprintf(stderr, "%s %s %s %zu B:", bench, transport, key.first.c_str(), key.second);
      for (double v : values) std::fprintf(stderr, " %.3f", v);
      if (have_peer) {
        std::fprintf(stderr, "  | %s:", peer_name.c_str());
        for (double v : it->second) std::fprintf(stderr, " %.3f", v);
      }
      std::fprintf(stderr, "\n");
    }
    out.add({bench, transport, 2, key.second, key.first, median(values),
             have_peer ? peer_name : "none", have_peer ? median(it->second) : 0.0});
  }
}

/// Which ways in a run measures: VESSEL_BENCH_P2P_PATHS, a comma-separated subset of comm, mpi,
/// actor, hosted (all when unset), so that one path can be compared with itself across builds
/// without waiting for the others.
struct p2p_paths {
  bool comm = true, mpi = true, actor = true, hosted = true;

  static std::optional<p2p_paths> from_env() {
    const char* v = std::getenv("VESSEL_BENCH_P2P_PATHS");
    if (v == nullptr || *v == '\0') return p2p_paths{};
    p2p_paths chosen{false, false, false, false};
    std::stringstream list{v};
    for (std::string name; std::getline(list, name, ',');) {
      if (name == "comm")
        chosen.comm = true;
      else if (name == "mpi")
        chosen.mpi = true;
      else if (name == "actor")
        chosen.actor = true;
      else if (name == "hosted")
        chosen.hosted = true;
      else
        return std::nullopt;
    }
    return chosen;
  }
};

int run_p2p(const bench_options& opts, report& out, const char* transport) {
  const p2p_schedule schedule = p2p_schedule::from(opts);
  if (schedule.latency.empty() && schedule.bandwidth.empty()) {
    std::fprintf(stderr, "vessel-bench p2p: no size to measure\n");
    return 2;
  }
  const auto paths = p2p_paths::from_env();
  if (!paths) {
    std::fprintf(stderr,
                 "vessel-bench p2p: VESSEL_BENCH_P2P_PATHS takes a comma-separated subset of "
                 "comm, mpi, actor, hosted\n");
    return 2;
  }
  auto mpi = paths->mpi ? mpi_command(transport) : std::nullopt;
  samples comm_side, actor_side, hosted_side, mpi_side;
  for (std::size_t run = 0; run < opts.runs; ++run) {
    if (paths->comm && !run_vessel(p2p_path::comm, transport, schedule, comm_side)) {
      std::fprintf(stderr, "vessel-bench p2p: the comm ranks failed (run %zu)\n", run);
      return 1;
    }
    if (mpi && !run_mpi(*mpi, schedule, mpi_side)) mpi.reset();
    if (paths->actor && !run_vessel(p2p_path::actor, transport, schedule, actor_side)) {
      std::fprintf(stderr, "vessel-bench p2p: the actor ranks failed (run %zu)\n", run);
      return 1;
    }
    if (paths->hosted && !run_vessel(p2p_path::hosted_actor, transport, schedule, hosted_side)) {
      std::fprintf(stderr, "vessel-bench p2p: the hosted actor ranks failed (run %zu)\n", run);
      return 1;
    }
  }
  const std::string peer_name =
      std::string{"ompi-"} + (std::string{transport} == "shm" ? "vader" : "tcp");
  add_rows(out, "p2p", transport, comm_side, mpi_side, peer_name, opts.verbose);
  add_rows(out, "p2p.actor", transport, actor_side, mpi_side, peer_name, opts.verbose);
  add_rows(out, "p2p.hosted", transport, hosted_side, mpi_side, peer_name, opts.verbose);
  return 0;
}

int run_p2p_tcp(const bench_options& opts, report& out) {
  return run_p2p(opts, out, "tcp");
}
int run_p2p_shm(const bench_options& opts, report& out) {
  return run_p2p(opts, out, "shm");
}

}  // namespace

VESSEL_BENCH_REGISTER(p2p_tcp, "p2p", "tcp",
                      "comm and rank-actor send/recv, 2 rank processes over TCP, vs Open MPI "
                      "(btl tcp)",
                      &run_p2p_tcp);
VESSEL_BENCH_REGISTER(p2p_shm, "p2p", "shm",
                      "comm and rank-actor send/recv, 2 rank processes over shm, vs Open MPI "
                      "(btl vader)",
                      &run_p2p_shm);

}  // namespace vessel::bench
