// vessel-bench coll --transport tcp|shm: allreduce, broadcast, allgather and reduce_scatter of
// float32 sums, 8 B .. 64 MiB, on 2 and 4 rank processes (--ranks N for one world size).
//   vessel = collectives::communicator over real ranks (vessel-bench-coll-rank, started here the
//            way a launcher starts ranks: VESSEL_RANK/WORLD_SIZE/STORE/TOKEN/TRANSPORT);
//   peer   = Open MPI (bench/peers/mpi_coll.cpp under mpirun), --mca btl self,tcp or self,vader,
//            once as it comes ("ompi_tcp") and once in its best configuration here
//            ("ompi_tcp_nounmap": malloc told not to unmap, see /work/shared/notes/PEERS.md).
// Runs interleave vessel, peer, best peer, vessel, ... (--runs of each); the medians of each
// side's slowest-rank time per call give time, algbw and busbw (nccl-tests definitions).
// Before the rows, a table names the algorithm vessel's selector picked for each size.
// VESSEL_BENCH_PEER_MPI=none (or a path to another mpi_coll) skips (or replaces) the peer.

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tools/vessel_bench/coll_plan.hpp"
#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/report.hpp"

namespace vessel::bench {
namespace {

constexpr std::size_t default_sizes[] = {8,         64,        512,       4096,      32768,
                                         262144,    std::size_t{1} << 20, std::size_t{4} << 20,
                                         std::size_t{16} << 20, std::size_t{64} << 20};
constexpr auto run_timeout = std::chrono::minutes{10};

using point = std::pair<std::string, std::size_t>;  // (operation, size_bytes)

/// One side's results of one run: seconds per call, and the algorithm (vessel only).
struct run_result {
  bool ok = false;
  std::string error;
  std::map<point, double> seconds;
  std::map<point, std::string> algorithm;
};

std::string directory_of_self() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  std::string p(path, static_cast<std::size_t>(n));
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

bool executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

bool on_path(const char* program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs{path ? path : ""};
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && executable(dir + "/" + program)) return true;
  }
  return false;
}

std::uint16_t free_loopback_port() {
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

std::string read_file(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The last `lines` lines of `text`, for error messages.
std::string tail(const std::string& text, int lines) {
  std::size_t at = text.size();
  while (lines-- > 0 && at > 0) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) return text;
  }
  return text.substr(at + 1);
}

struct process_spec {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
};

/// Runs every process to completion (all killed past run_timeout); their exit codes and their
/// stdout+stderr.
std::vector<std::pair<int, std::string>> run_processes(const std::vector<process_spec>& specs) {
  char dir_template[] = "/tmp/vessel-bench-coll-XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  std::vector<std::pair<int, std::string>> out(specs.size(), {-1, {}});
  if (dir == nullptr) {
    for (auto& o : out) o.second = "mkdtemp failed";
    return out;
  }
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    logs.push_back(std::string{dir} + "/out" + std::to_string(i));
    std::vector<char*> argv;
    for (const std::string& a : specs[i].argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const auto& [k, v] : specs[i].env) ::setenv(k.c_str(), v.c_str(), 1);
      ::execvp(argv[0], argv.data());
      std::perror(argv[0]);
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + run_timeout;
  std::size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != done) continue;
        out[i].first = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (out[i].first != -1) continue;
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], &status, 0);
        out[i].first = 128 + SIGKILL;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  for (std::size_t i = 0; i < logs.size(); ++i) {
    out[i].second = read_file(logs[i]);
    std::remove(logs[i].c_str());
  }
  ::rmdir(dir);
  return out;
}

/// "R <op> <size> <algorithm> <seconds>" lines into `r`.
void parse_lines(const std::string& text, run_result& r) {
  std::stringstream in{text};
  for (std::string line; std::getline(in, line);) {
    std::stringstream fields{line};
    std::string tag, op, algorithm;
    std::size_t size = 0;
    double seconds = 0;
    if (fields >> tag >> op >> size >> algorithm >> seconds && tag == "R") {
      r.seconds[{op, size}] = seconds;
      r.algorithm[{op, size}] = algorithm;
    }
  }
}

std::string join_sizes(const std::vector<std::size_t>& sizes) {
  std::string s;
  for (std::size_t v : sizes) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

run_result run_vessel(const std::string& transport, std::size_t ranks, const std::string& sizes,
                      std::size_t iterations) {
  const std::string program = directory_of_self() + "/vessel-bench-coll-rank";
  const std::string store = "127.0.0.1:" + std::to_string(free_loopback_port());
  std::vector<process_spec> specs;
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    specs.push_back({{program, sizes, std::to_string(iterations)},
                     {{"VESSEL_RANK", std::to_string(rank)},
                      {"VESSEL_WORLD_SIZE", std::to_string(ranks)},
                      {"VESSEL_STORE", store},
                      {"VESSEL_TOKEN", "vessel-bench-coll-token-0123456789abcdef"},
                      {"VESSEL_TRANSPORT", transport}}});
  }
  const auto results = run_processes(specs);
  run_result r;
  for (std::size_t rank = 0; rank < results.size(); ++rank) {
    if (results[rank].first != 0) {
      r.error = "vessel rank " + std::to_string(rank) + " exited " +
                std::to_string(results[rank].first) + ":\n" + tail(results[rank].second, 15);
      return r;
    }
  }
  parse_lines(results[0].second, r);
  r.ok = true;
  return r;
}

/// One way of running Open MPI: its name in the peer column and its mpirun options.
struct mpi_config {
  std::string name;
  std::vector<std::string> options;
};

std::vector<mpi_config> mpi_configs(const std::string& transport) {
  std::vector<std::string> btl = transport == "tcp"
                                     ? std::vector<std::string>{"--mca", "btl", "self,tcp", "--mca",
                                                                "btl_tcp_if_include", "lo"}
                                     : std::vector<std::string>{"--mca", "btl", "self,vader"};
  const std::string base = transport == "tcp" ? "ompi_tcp" : "ompi_vader";
  std::vector<std::string> best = btl;
  for (const char* o : {"-x", "MALLOC_MMAP_MAX_=0", "-x", "MALLOC_TRIM_THRESHOLD_=17179869184"})
    best.emplace_back(o);
  return {{base, btl}, {base + "_nounmap", best}};
}

run_result run_mpi(const std::string& peer, const mpi_config& config, std::size_t ranks,
                   const std::string& sizes, std::size_t iterations) {
  process_spec spec;
  spec.argv = {"mpirun", "-n", std::to_string(ranks), "--oversubscribe", "--allow-run-as-root",
               "--mca", "pml", "ob1"};
  spec.argv.insert(spec.argv.end(), config.options.begin(), config.options.end());
  if (std::getenv("VESSEL_BENCH_COLL_OPS") != nullptr)
    spec.argv.insert(spec.argv.end(), {"-x", "VESSEL_BENCH_COLL_OPS"});
  spec.argv.insert(spec.argv.end(), {peer, sizes, std::to_string(iterations)});
  const auto results = run_processes({spec});
  run_result r;
  if (results[0].first != 0) {
    r.error = config.name + ": mpirun exited " + std::to_string(results[0].first) + ":\n" +
              tail(results[0].second, 15);
    return r;
  }
  parse_lines(results[0].second, r);
  r.ok = true;
  return r;
}

double bus_factor(const std::string& op, std::size_t ranks) {
  const double n = static_cast<double>(ranks);
  if (op == "allreduce") return 2 * (n - 1) / n;
  if (op == "broadcast") return 1;
  return (n - 1) / n;  // allgather, reduce_scatter
}

void print_algorithms(const std::string& transport, std::size_t ranks,
                      const std::vector<std::size_t>& sizes,
                      const std::vector<std::string_view>& ops, const run_result& vessel) {
  std::printf("coll %s, %zu ranks: the algorithm vessel selected per size\n", transport.c_str(),
              ranks);
  std::printf("  %-10s", "size");
  for (std::string_view op : ops) std::printf(" %-20.*s", static_cast<int>(op.size()), op.data());
  std::printf("\n");
  for (std::size_t size : sizes) {
    std::printf("  %-10zu", size);
    for (std::string_view op : ops) {
      const auto it = vessel.algorithm.find({std::string{op}, size});
      std::printf(" %-20s", it == vessel.algorithm.end() ? "-" : it->second.c_str());
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

int run_coll(const std::string& transport, const bench_options& opts, report& out) {
  std::vector<std::size_t> sizes = opts.sizes;
  if (sizes.empty()) sizes.assign(std::begin(default_sizes), std::end(default_sizes));
  const std::vector<std::size_t> worlds =
      opts.ranks != 0 ? std::vector<std::size_t>{opts.ranks} : std::vector<std::size_t>{2, 4};
  const std::string size_list = join_sizes(sizes);
  // Read again by both sides' rank processes, which inherit it (mpirun is told to pass it on).
  const std::vector<std::string_view> ops = selected_coll_ops_from_env();
  if (ops.empty()) {
    std::fprintf(stderr,
                 "coll: VESSEL_BENCH_COLL_OPS='%s': a comma-separated list of allreduce, "
                 "broadcast, allgather, reduce_scatter\n",
                 std::getenv("VESSEL_BENCH_COLL_OPS"));
    return 1;
  }
  if (!executable(directory_of_self() + "/vessel-bench-coll-rank")) {
    std::fprintf(stderr, "coll: %s/vessel-bench-coll-rank is missing (build it)\n",
                 directory_of_self().c_str());
    return 1;
  }

  // The peer, or why there is none.
  const char* peer_env = std::getenv("VESSEL_BENCH_PEER_MPI");
  const std::string peer =
      peer_env && *peer_env ? std::string{peer_env} : directory_of_self() + "/peer_mpi_coll";
  std::string no_peer;
  if (peer == "none")
    no_peer = "VESSEL_BENCH_PEER_MPI=none";
  else if (!on_path("mpirun"))
    no_peer = "mpirun not found (install openmpi-bin, scripts/setup-deps)";
  else if (!executable(peer))
    no_peer = peer + " not built (Open MPI's development files were missing at configure time)";
  std::vector<mpi_config> configs = no_peer.empty() ? mpi_configs(transport)
                                                    : std::vector<mpi_config>{};
  if (!no_peer.empty())
    std::fprintf(stderr, "coll %s: no Open MPI rows: %s\n", transport.c_str(), no_peer.c_str());

  for (const std::size_t ranks : worlds) {
    if (ranks < 2) {
      std::fprintf(stderr, "coll: --ranks must be at least 2\n");
      return 1;
    }
    std::vector<run_result> vessel_runs;
    std::vector<std::vector<run_result>> peer_runs(configs.size());
    std::vector<bool> peer_failed(configs.size(), false);
    for (std::size_t run = 0; run < opts.runs; ++run) {  // A B B' A B B' ...
      run_result v = run_vessel(transport, ranks, size_list, opts.iterations);
      if (!v.ok) {
        std::fprintf(stderr, "coll %s %zu ranks: %s\n", transport.c_str(), ranks, v.error.c_str());
        return 1;
      }
      if (opts.verbose) {
        for (const auto& [p, s] : v.seconds)
          std::fprintf(stderr, "run %zu vessel %s %zu %.3f us\n", run, p.first.c_str(), p.second,
                       s * 1e6);
      }
      vessel_runs.push_back(std::move(v));
      for (std::size_t c = 0; c < configs.size(); ++c) {
        if (peer_failed[c]) continue;
        run_result m = run_mpi(peer, configs[c], ranks, size_list, opts.iterations);
        if (!m.ok) {  // Open MPI that cannot start here is a missing peer, not a failed bench
          std::fprintf(stderr, "coll %s %zu ranks: no %s rows: %s\n", transport.c_str(), ranks,
                       configs[c].name.c_str(), m.error.c_str());
          peer_failed[c] = true;
          peer_runs[c].clear();
          continue;
        }
        if (opts.verbose) {
          for (const auto& [p, s] : m.seconds)
            std::fprintf(stderr, "run %zu %s %s %zu %.3f us\n", run, configs[c].name.c_str(),
                         p.first.c_str(), p.second, s * 1e6);
        }
        peer_runs[c].push_back(std::move(m));
      }
    }
    print_algorithms(transport, ranks, sizes, ops, vessel_runs.front());

    auto median_seconds = [](const std::vector<run_result>& runs, const point& p) {
      std::vector<double> v;
      for (const run_result& r : runs) {
        if (auto it = r.seconds.find(p); it != r.seconds.end()) v.push_back(it->second);
      }
      return v.empty() ? 0.0 : median(v);
    };
    for (std::string_view op_view : ops) {
      const std::string op{op_view};
      for (std::size_t size : sizes) {
        const point p{op, size};
        const double vessel_s = median_seconds(vessel_runs, p);
        if (vessel_s <= 0) continue;
        auto emit = [&](const std::string& peer_name, double peer_s) {
          const auto bw = [&](double s) { return s > 0 ? static_cast<double>(size) / s / 1e9 : 0; };
          const double f = bus_factor(op, ranks);
          out.add({op, transport, ranks, size, "time", vessel_s * 1e6, peer_name, peer_s * 1e6});
          out.add({op, transport, ranks, size, "algbw", bw(vessel_s), peer_name, bw(peer_s)});
          out.add({op, transport, ranks, size, "busbw", bw(vessel_s) * f, peer_name,
                   bw(peer_s) * f});
        };
        bool any_peer = false;
        for (std::size_t c = 0; c < configs.size(); ++c) {
          if (peer_failed[c] || peer_runs[c].empty()) continue;
          const double peer_s = median_seconds(peer_runs[c], p);
          if (peer_s <= 0) continue;
          emit(configs[c].name, peer_s);
          any_peer = true;
        }
        if (!any_peer) emit("none", 0.0);
      }
    }
  }
  return 0;
}

int run_coll_tcp(const bench_options& opts, report& out) { return run_coll("tcp", opts, out); }
int run_coll_shm(const bench_options& opts, report& out) { return run_coll("shm", opts, out); }

}  // namespace

VESSEL_BENCH_REGISTER(coll_tcp, "coll", "tcp",
                      "allreduce/broadcast/allgather/reduce_scatter on 2 and 4 rank processes "
                      "over TCP vs Open MPI btl tcp",
                      &run_coll_tcp);
VESSEL_BENCH_REGISTER(coll_shm, "coll", "shm",
                      "the same over shared memory vs Open MPI btl vader",
                      &run_coll_shm);

}  // namespace vessel::bench
