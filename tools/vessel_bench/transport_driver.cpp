#include "tools/vessel_bench/transport_driver.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>

#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/report.hpp"

namespace vessel::bench {

void bench_fail(const std::string& what) { throw std::runtime_error(what); }

transport_plan transport_plan::from(const bench_options& opts, std::size_t max_frame,
                                    std::size_t small_latency_iterations) {
  transport_plan p;
  p.runs = opts.runs;
  p.fixed_iterations = opts.iterations;
  p.small_latency_iterations = small_latency_iterations;
  if (opts.sizes.empty()) {
    for (std::size_t s = 8; s <= max_frame; s *= 8) p.latency_sizes.push_back(s);
    if (p.latency_sizes.back() != max_frame) p.latency_sizes.push_back(max_frame);
    for (std::size_t s = 64u << 10; s <= (64u << 20); s *= 4) p.bandwidth_sizes.push_back(s);
  } else {
    for (auto s : opts.sizes) {
      if (s <= max_frame) p.latency_sizes.push_back(s);  // one frame each way
      if (s >= (64u << 10)) p.bandwidth_sizes.push_back(s);
    }
  }
  return p;
}

std::size_t transport_plan::latency_iters(std::size_t size) const {
  if (fixed_iterations) return fixed_iterations;
  return size <= 4096 ? small_latency_iterations : std::max<std::size_t>(64, (64u << 20) / size);
}

std::size_t transport_plan::bandwidth_iters(std::size_t size) const {
  if (fixed_iterations) return fixed_iterations;
  return std::max<std::size_t>(4, (256u << 20) / size);
}

std::size_t transport_plan::max_size() const {
  std::size_t m = 1;
  for (auto s : latency_sizes) m = std::max(m, s);
  for (auto s : bandwidth_sizes) m = std::max(m, s);
  return m;
}

namespace {

void measure_point(const char* bench, const char* metric, std::size_t size, std::size_t iters,
                   std::size_t warm_up_iters, std::size_t runs, const ab_sides& sides,
                   const schedule_output& output) {
  sides.vessel(size, warm_up_iters);
  sides.peer(size, warm_up_iters);
  std::vector<double> mine, theirs;
  for (std::size_t r = 0; r < runs; ++r) {
    mine.push_back(sides.vessel(size, iters));
    theirs.push_back(sides.peer(size, iters));
  }
  if (output.out == nullptr) return;
  if (output.verbose) {
    std::fprintf(stderr, "%s %s %zu B %s:", output.transport, bench, size, metric);
    for (std::size_t i = 0; i < mine.size(); ++i)
      std::fprintf(stderr, " %.3f/%.3f", mine[i], theirs[i]);
    std::fprintf(stderr, "  (vessel/%s)\n", output.peer);
  }
  output.out->add({bench, output.transport, 2, size, metric, median(mine), output.peer,
                   median(theirs)});
}

}  // namespace

void run_schedule(const transport_plan& plan, const ab_sides& latency, const ab_sides& bandwidth,
                  const schedule_output& output) {
  for (auto size : plan.latency_sizes) {
    const auto iters = plan.latency_iters(size);
    measure_point("pingpong", "latency", size, iters, iters / 10 + 1, plan.runs, latency, output);
  }
  for (auto size : plan.bandwidth_sizes) {
    measure_point("stream", "bandwidth", size, plan.bandwidth_iters(size), 1, plan.runs,
                  bandwidth, output);
  }
}

int run_two_processes(const char* name, const std::function<void()>& responder,
                      const std::function<void()>& initiator) {
  std::fflush(nullptr);  // nothing buffered twice
  const pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "vessel-bench %s: fork failed\n", name);
    return 1;
  }
  if (child == 0) {
    int rc = 0;
    try {
      responder();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "vessel-bench %s (responder): %s\n", name, e.what());
      rc = 1;
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int rc = 0;
  try {
    initiator();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vessel-bench %s (initiator): %s\n", name, e.what());
    ::kill(child, SIGKILL);
    rc = 1;
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  return rc;
}

}  // namespace vessel::bench
