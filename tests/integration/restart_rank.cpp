// One rank of the rank-restart test (tests/integration/rank_restart_test.cpp starts three, kills
// rank 1 and starts a new rank-1 process with the same environment). Exit 0 means every check of
// this rank passed; progress lines on stdout are what the test waits for.
//
//   restart_rank
//
// First incarnation (VESSEL_INCARNATION unset or 0): every rank exchanges one message with every
// other ("round 1"), prints "rank R ready"; rank 1 then waits to be killed. Ranks 0 and 2 print
// "rank R saw rank 1 down" if their link to it goes down, wait until runtime::peer_restarts(1)
// counts the new process and its link is up, then answer its greeting: round 2 is rank 1 -> R
// (a hello naming its incarnation) and R -> rank 1 (the reply), checked on both sides. Everyone
// ends with comm::finalize() (a barrier over the new world: the restarted rank included).

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "actors/comm.hpp"
#include "actors/runtime.hpp"

namespace {

using namespace std::chrono_literals;
using vessel::actors::peer_state;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "FAIL: %s\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

std::string text_of(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

constexpr std::uint64_t round1_tag = 1, hello_tag = 2, reply_tag = 3;
constexpr auto generous = std::chrono::milliseconds{120'000};  // loaded CI, ASan

}  // namespace

int main() {
  try {
    const char* inc = std::getenv("VESSEL_INCARNATION");
    const std::uint64_t incarnation = inc != nullptr ? std::strtoull(inc, nullptr, 10) : 0;
    vessel::comm c = vessel::comm::init();
    const std::uint32_t me = c.rank(), n = c.size();
    if (n != 3) die("run with 3 ranks");

    if (incarnation > 0) {
      if (me != 1) die("only rank 1 is restarted in this test");
      say("rank 1 incarnation " + std::to_string(incarnation) + " connected");
      for (std::uint32_t peer : {0u, 2u}) {
        c.send(bytes_of("hello from incarnation " + std::to_string(incarnation)), peer, hello_tag);
      }
      for (std::uint32_t peer : {0u, 2u}) {
        const std::string got = text_of(c.recv(peer, reply_tag, generous));
        const std::string want = "welcome back from rank " + std::to_string(peer);
        if (got != want) die("rank 1 got '" + got + "' from rank " + std::to_string(peer));
        say("rank 1 got the reply of rank " + std::to_string(peer));
      }
      c.finalize();
      say("OK rank 1 restarted");
      return 0;
    }

    // Round 1: everyone with everyone.
    for (std::uint32_t peer = 0; peer < n; ++peer) {
      if (peer != me) c.send(bytes_of("round 1 from " + std::to_string(me)), peer, round1_tag);
    }
    for (std::uint32_t peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      const std::string got = text_of(c.recv(peer, round1_tag, generous));
      if (got != "round 1 from " + std::to_string(peer)) die("round 1: got '" + got + "'");
    }
    say("rank " + std::to_string(me) + " ready");
    if (me == 1) {
      for (;;) std::this_thread::sleep_for(1s);  // until the test kills it
    }

    // Survivors: wait for the new rank-1 process (a poll with a deadline, not a guess).
    vessel::actors::runtime& rt = c.runtime();
    const auto until = std::chrono::steady_clock::now() + generous;
    bool said_down = false;
    while (!(rt.peer_restarts(1) >= 1 && rt.peer_status(1) == peer_state::up)) {
      if (!said_down && rt.peer_status(1) == peer_state::down) {
        say("rank " + std::to_string(me) + " saw rank 1 down");
        said_down = true;
      }
      if (std::chrono::steady_clock::now() > until) {
        die("rank 1 never came back: state " +
            std::string{vessel::actors::to_string(rt.peer_status(1))} + ", restarts " +
            std::to_string(rt.peer_restarts(1)));
      }
      std::this_thread::sleep_for(10ms);
    }
    say("rank " + std::to_string(me) + " saw rank 1 restart (restarts " +
        std::to_string(rt.peer_restarts(1)) + ")");
    const std::string hello = text_of(c.recv(1, hello_tag, generous));
    if (hello != "hello from incarnation 1") die("round 2: got '" + hello + "'");
    c.send(bytes_of("welcome back from rank " + std::to_string(me)), 1, reply_tag);
    say("rank " + std::to_string(me) + " answered the new rank 1");
    const auto stats = c.link_stats(1);
    say("rank " + std::to_string(me) + " link to rank 1: restarts " +
        std::to_string(stats.restarts));
    c.finalize();
    say("OK rank " + std::to_string(me));
    return 0;
  } catch (const std::exception& e) {
    die(e.what());
  }
}
