// vessel-run: starts the ranks of one vessel job on this machine.
//
//   vessel-run -n N [options] PROGRAM [ARGS...]
//   vessel-run --topology FILE [options] PROGRAM [ARGS...]
//
// Options: --restart N (restart a rank that dies, up to N times, with exponential backoff),
// --timeout S (stop the job after S seconds, exit 124), --grace S (TERM -> KILL delay, default 5).
// Each rank gets VESSEL_RANK, VESSEL_WORLD_SIZE, VESSEL_LOCAL_RANK, VESSEL_INCARNATION,
// VESSEL_STORE and VESSEL_TOKEN_FILE (a fresh token per job), and with --restart N
// VESSEL_RESTARTS=N (collectives in flight are retried across a restart). vessel-run serves the store itself
// (VESSEL_STORE_SERVED=1 tells rank 0 so), so that it outlives any rank: a restarted rank 0 finds
// the job's keys and the survivors find its new address. Ranks in other network namespaces
// (topology hosts with netns) cannot reach it: there rank 0 serves it on a free port, as before.
// Under mpirun or srun (OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_STEP_ID with SLURM_PROCID set)
// it spawns nothing: it execs PROGRAM, which reads its rank from their variables.
// Exit status: 0, the first failing rank's status (128 + signal), 124 on --timeout, 2 usage.

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/vessel_run/job_secrets.hpp"
#include "tools/vessel_run/job_store.hpp"
#include "tools/vessel_run/launcher.hpp"
#include "tools/vessel_run/topology.hpp"
#include "tools/vessel_run/trace_merge.hpp"

namespace {

using namespace vessel::tools;

constexpr const char* usage_text =
    "usage: vessel-run -n N [--restart N] [--timeout S] [--grace S] PROGRAM [ARGS...]\n"
    "       vessel-run --topology FILE [--restart N] [--timeout S] [--grace S] PROGRAM [ARGS...]\n";

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "vessel-run: %s\n%s", why.c_str(), usage_text);
  std::exit(2);
}

struct options {
  std::optional<int> ranks;
  std::optional<std::string> topology;
  int restart_max = 0;
  double timeout_s = 0;
  double grace_s = 5;
  std::vector<std::string> program;
};

int parse_count(std::string_view option, std::string_view text, int min) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < min) {
    usage_error(std::string{option} + " wants an integer >= " + std::to_string(min) + ", got '" +
                std::string{text} + "'");
  }
  return value;
}

double parse_seconds(std::string_view option, std::string_view text) {
  std::string copy{text};
  char* end = nullptr;
  double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || *end != '\0' || !(value > 0) || value > 1e7) {
    usage_error(std::string{option} + " wants a positive number of seconds, got '" + copy + "'");
  }
  return value;
}

options parse(int argc, char** argv) {
  options o;
  int i = 1;
  auto value_of = [&](std::string_view option) -> std::string_view {
    if (i + 1 >= argc) usage_error(std::string{option} + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;
    if (arg == "-h" || arg == "--help") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    } else if (arg == "-n" || arg == "--np") {
      o.ranks = parse_count(arg, value_of(arg), 1);
    } else if (arg == "--topology") {
      o.topology = std::string{value_of(arg)};
    } else if (arg == "--restart") {
      o.restart_max = parse_count(arg, value_of(arg), 0);
    } else if (arg == "--timeout") {
      o.timeout_s = parse_seconds(arg, value_of(arg));
    } else if (arg == "--grace") {
      o.grace_s = parse_seconds(arg, value_of(arg));
    } else {
      usage_error("unknown option '" + std::string{arg} + "'");
    }
  }
  for (; i < argc; ++i) o.program.emplace_back(argv[i]);
  if (o.program.empty()) usage_error("no PROGRAM given");
  if (o.ranks && o.topology) usage_error("-n and --topology exclude each other");
  if (!o.ranks && !o.topology) usage_error("give -n N or --topology FILE");
  return o;
}

bool under_other_launcher() {
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  return set("OMPI_COMM_WORLD_RANK") || set("PMI_RANK") ||
         (set("SLURM_PROCID") && set("SLURM_STEP_ID"));
}

/// How a host's ranks are started: in place, or inside its network namespace. An ssh launcher
/// slots in here ({"ssh", address, "--", "env", VARS...}) once hosts say `ssh = true`.
std::vector<std::string> launch_wrapper(const host_entry& host) {
  if (host.netns) return {"ip", "netns", "exec", *host.netns};
  return {};
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds{static_cast<long long>(seconds * 1000 + 0.5)};
}

}  // namespace

int main(int argc, char** argv) {
  options o = parse(argc, argv);

  if (under_other_launcher()) {
    std::vector<char*> args;
    for (auto& s : o.program) args.push_back(s.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "vessel-run: cannot run '%s': %s\n", args[0], std::strerror(errno));
    return 127;
  }

  job_spec job;
  job.program = o.program;
  job.restart_max = o.restart_max;
  job.timeout = to_ms(o.timeout_s);
  job.grace = to_ms(o.grace_s);

  std::string store_host = "127.0.0.1";
  for (int r = 0; r < o.ranks.value_or(0); ++r) {
    rank_spec spec;
    spec.rank = r;
    spec.local_rank = r;
    job.ranks.push_back(std::move(spec));
  }
  if (o.topology) {
    auto loaded = load_topology(*o.topology);
    if (!loaded) {
      std::fprintf(stderr, "vessel-run: %s\n", loaded.error().message().c_str());
      return 2;
    }
    const topology& t = loaded.value();
    store_host = t.hosts.front().address;  // the store is served on rank 0's host
    for (int r = 0; r < t.world_size(); ++r) {
      auto [host_index, local] = t.place(r);
      rank_spec spec;
      spec.rank = r;
      spec.local_rank = local;
      spec.wrapper = launch_wrapper(t.hosts[host_index]);
      spec.env = rank_environment(t, r);
      job.ranks.push_back(std::move(spec));
    }
  }

  std::unique_ptr<job_store> served_store;
  std::string store;
  const bool every_rank_here = std::all_of(job.ranks.begin(), job.ranks.end(),
                                           [](const rank_spec& r) { return r.wrapper.empty(); });
  if (every_rank_here) {
    auto served = job_store::serve(store_host);
    if (served) {
      served_store = std::move(served).value();
      store = served_store->address();
    } else {
      std::fprintf(stderr,
                   "vessel-run: cannot serve the store on %s (%s): rank 0 serves it, and the job "
                   "does not survive rank 0's death\n",
                   store_host.c_str(), served.error().message().c_str());
    }
  }
  if (!served_store) {
    // The probe runs in vessel-run's namespace: a port free here is a fair guess elsewhere too,
    // and a fresh network namespace has every port free.
    auto port = pick_free_port("127.0.0.1");
    if (!port) {
      std::fprintf(stderr, "vessel-run: no free port for the store: %s\n",
                   port.error().message().c_str());
      return 1;
    }
    store = store_host + ":" + std::to_string(port.value());
  }
  auto token = token_file::create();
  if (!token) {
    std::fprintf(stderr, "vessel-run: cannot write the job's token file: %s\n",
                 token.error().message().c_str());
    return 1;
  }
  for (auto& rank : job.ranks) {
    rank.env.emplace_back("VESSEL_STORE", store);
    // Always set: one inherited from an outer job must not stop rank 0 from serving this one.
    rank.env.emplace_back(store_served_env, served_store ? "1" : "0");
    rank.env.emplace_back("VESSEL_TOKEN_FILE", token.value().path());
    // The world communicator retries a collective in flight across a restart only when told
    // restarts can happen; a value the user set (0 to opt out) wins.
    if (o.restart_max > 0 && std::getenv("VESSEL_RESTARTS") == nullptr)
      rank.env.emplace_back("VESSEL_RESTARTS", std::to_string(o.restart_max));
  }
  const int status = run_job(job);
  served_store.reset();  // after the last rank: every goodbye went through it
  // VESSEL_TRACE=out.json: each rank wrote out.rank<r>.json; out.json is the one to open.
  if (const char* trace = std::getenv("VESSEL_TRACE"); trace != nullptr && *trace != '\0') {
    trace_merge_report report;
    if (merge_rank_traces(trace, static_cast<std::uint32_t>(job.ranks.size()), report)) {
      std::fprintf(stderr, "vessel-run: trace of %u rank(s) in %s%s%s%s\n", report.merged, trace,
                   report.missing.empty() ? "" : " (no file from rank(s) ", report.missing.c_str(),
                   report.missing.empty() ? "" : ")");
      if (report.dropped_events > 0) {
        std::fprintf(stderr,
                     "vessel-run: trace truncated: %llu events dropped (VESSEL_TRACE_MAX_EVENTS)\n",
                     static_cast<unsigned long long>(report.dropped_events));
      }
    } else {
      std::fprintf(stderr, "vessel-run: VESSEL_TRACE=%s: no rank left a trace to merge\n", trace);
    }
  }
  return status;
}
