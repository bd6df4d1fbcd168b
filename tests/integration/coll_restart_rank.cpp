// One rank of the collective-restart test (tests/integration/coll_restart_test.cpp starts three
// with VESSEL_RESTARTS=1): a loop of `iterations` int64 sum allreduces (ring) whose inputs come
// from (rank, iteration), every result checked. Odd iterations run in place. Rank 1's first
// process kills itself (SIGKILL) in the middle of iteration `kill_at`: once its first chunk of
// that allreduce went to rank 2 and rank 2 acknowledged everything it was sent (so that nothing
// of the iterations before is lost with it); ranks 0 and 2 start that iteration only once rank 1
// says so in the store (else a slow rank 1 finds their chunks waiting and goes past its first
// step in the same call, and a survivor may finish the iteration before the restart, which the
// retry does not cover: docs/collective_algorithms.md). The test then starts a new rank-1 process
// (VESSEL_INCARNATION=1): its communicator says restarted() and which iteration it joins
// (rejoin_sequence(): iteration i is collective #i), and it runs the loop from there. Exit 0
// means every check of this rank passed.
//
//   coll_restart_rank <iterations> <kill_at>

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "actors/comm.hpp"
#include "actors/kv_store_client.hpp"
#include "actors/runtime.hpp"
#include "collectives/communicator.hpp"

namespace {

using namespace std::chrono_literals;
using vessel::collectives::call_options;
using vessel::collectives::communicator;
using vessel::collectives::dtype;
using vessel::collectives::reduce_op;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "FAIL: %s\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

constexpr std::size_t count = 3 * 1000 + 1;  // uneven blocks over three ranks
constexpr std::string_view dying_key = "test/rank 1 dies";

std::int64_t value(std::uint32_t rank, std::uint64_t iteration, std::size_t j) {
  return static_cast<std::int64_t>((rank + 1) * 1000003 + iteration * 7919 + j);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) die("usage: coll_restart_rank <iterations> <kill_at>");
  const std::uint64_t iterations = std::strtoull(argv[1], nullptr, 10);
  const std::uint64_t kill_at = std::strtoull(argv[2], nullptr, 10);
  try {
    vessel::comm c = vessel::comm::init();
    vessel::actors::runtime& rt = c.runtime();
    const std::uint32_t me = c.rank(), n = c.size();
    if (n != 3) die("run with 3 ranks");
    auto made = communicator::create(rt);
    if (!made) die("communicator::create: " + made.error().message());
    communicator& world = *made.value();

    std::uint64_t first = 0;
    if (world.restarted()) {
      if (!world.rejoin_sequence()) die("restarted, but no rejoin_sequence()");
      first = *world.rejoin_sequence();
      say("rank " + std::to_string(me) + " restarted (incarnation " +
          std::to_string(world.incarnation()) + ") joins iteration " + std::to_string(first));
    } else if (world.rejoin_sequence()) {
      die("not restarted, yet a rejoin_sequence()");
    }

    call_options ring;
    ring.algorithm = "ring";
    std::vector<std::int64_t> in(count), out(count), want(count);
    for (std::uint64_t i = first; i < iterations; ++i) {
      for (std::size_t j = 0; j < count; ++j) {
        in[j] = value(me, i, j);
        want[j] = 0;
        for (std::uint32_t r = 0; r < n; ++r) want[j] += value(r, i, j);
      }
      const bool in_place = i % 2 == 1;
      if (in_place) out = in;
      std::span<const std::byte> input =
          in_place ? std::as_bytes(std::span{out}) : std::as_bytes(std::span{in});
      if (me == 1 && !world.restarted() && i == kill_at) {
        const std::uint64_t before = rt.link_stats(2).messages_sent;
        auto pending = world.iallreduce(input, std::as_writable_bytes(std::span{out}), dtype::int64,
                                        reduce_op::sum, ring);
        // Event-driven: the first chunk of this allreduce left for rank 2, and rank 2 acked all
        // it got (the iterations before must not die with this process).
        const auto until = std::chrono::steady_clock::now() + 120s;
        for (;;) {
          const auto st = rt.link_stats(2);
          if (st.messages_sent > before && st.buffered_bytes == 0) break;
          if (std::chrono::steady_clock::now() > until) die("rank 2 never acked the first chunk");
          std::this_thread::sleep_for(1ms);
        }
        // The survivors start this iteration only now: nothing of theirs was there to let rank 1
        // go past its first step, so none of them can finish it without the retry.
        if (!rt.store().set(dying_key, std::to_string(i))) die("cannot tell the others");
        say("rank 1 dies in iteration " + std::to_string(i));
        ::raise(SIGKILL);
      }
      if (me != 1 && i == kill_at && !rt.store().get(dying_key, 120s)) {
        die("rank 1 never said it dies");
      }
      auto done = world.allreduce(input, std::as_writable_bytes(std::span{out}), dtype::int64,
                                  reduce_op::sum, ring);
      if (!done) die("iteration " + std::to_string(i) + ": " + done.error().message());
      for (std::size_t j = 0; j < count; ++j) {
        if (out[j] != want[j]) {
          die("iteration " + std::to_string(i) + ": element " + std::to_string(j) + " is " +
              std::to_string(out[j]) + ", want " + std::to_string(want[j]));
        }
      }
      say("rank " + std::to_string(me) + " iteration " + std::to_string(i) + " ok");
    }
    if (auto b = world.barrier(); !b) die("final barrier: " + b.error().message());
    say("OK rank " + std::to_string(me));
    made.value().reset();
    c.finalize();
    return 0;
  } catch (const std::exception& e) {
    die(e.what());
  }
}
