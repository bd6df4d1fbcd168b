// One rank of the VESSEL_TRACE test of vessel::comm (tests/integration/trace_test.cpp): nothing
// but vessel::comm, as a user program without collectives::communicator: a barrier, an int64
// allreduce of 1 element and one of 300'000 (2.4 MB: several chunks a round), each checked.
// Prints "OK rank <r> comm_trace".

#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "actors/comm.hpp"

int main() {
  try {
    vessel::comm world = vessel::comm::init();
    const auto p = static_cast<std::int64_t>(world.size());
    const auto me = static_cast<std::int64_t>(world.rank());
    world.barrier();
    int bad = 0;
    for (std::size_t n : {std::size_t{1}, std::size_t{300'000}}) {
      std::vector<std::int64_t> v(n, me + 1);
      world.allreduce(std::span<std::int64_t>(v), vessel::reduce_op::sum);
      for (std::int64_t x : v) bad += x != p * (p + 1) / 2;
    }
    world.finalize();
    if (bad != 0) {
      std::printf("FAIL rank %lld: %d element(s) wrong\n", static_cast<long long>(me), bad);
      return 1;
    }
    std::printf("OK rank %lld comm_trace\n", static_cast<long long>(me));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_trace_rank: %s\n", e.what());
    return 1;
  }
}
