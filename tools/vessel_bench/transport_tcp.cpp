// vessel-bench transport --transport tcp (work in progress: the measurement lands next).
#include "tools/vessel_bench/modes.hpp"
#include "tools/vessel_bench/report.hpp"

#include <cstdio>

namespace {

int run_transport_tcp(const vessel::bench::bench_options&, vessel::bench::report&) {
  std::fprintf(stderr, "vessel-bench: transport tcp is not implemented yet\n");
  return 1;
}

} // namespace

VESSEL_BENCH_REGISTER(transport_tcp, "transport", "tcp",
                      "loopback TCP ping-pong latency and streaming bandwidth vs plain sockets",
                      &run_transport_tcp);
