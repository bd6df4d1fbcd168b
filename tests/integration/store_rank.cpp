// One rank of vessel-run's "the store outlives rank 0" test (tests/integration/vessel_run_test.cpp),
// run as `vessel-run -n 2 --restart 1 store_rank`. Every step waits for a store key, never a time:
//   rank 0, incarnation 0: sets test/before-kill, waits for rank 1's test/rank1-ready, SIGKILLs
//     itself;
//   rank 0, incarnation 1: reads test/before-kill (set by the dead process) and sets
//     test/after-restart;
//   rank 1: sets test/rank1-ready, then waits on its one connection for test/after-restart.
// Exits 0 with "OK" lines, 1 with the reason on stderr.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "actors/endpoint.hpp"
#include "actors/kv_store_client.hpp"

namespace {

using namespace std::chrono_literals;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

int fail(const std::string& why) {
  std::fprintf(stderr, "store_rank: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main() {
  const std::string rank = env_or("VESSEL_RANK", "");
  const std::string incarnation = env_or("VESSEL_INCARNATION", "0");
  if (env_or("VESSEL_STORE_SERVED", "") != "1") return fail("VESSEL_STORE_SERVED is not 1");
  auto at = vessel::actors::parse_endpoint(env_or("VESSEL_STORE", ""), "VESSEL_STORE");
  if (!at) return fail(at.error().message());
  auto made = vessel::actors::kv_store_client::connect(at.value(), 60s);
  if (!made) return fail("connect: " + made.error().message());
  auto& store = *made.value();
  auto text = [](const std::vector<std::byte>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
  };

  if (rank == "0" && incarnation == "0") {
    if (auto s = store.set("test/before-kill", "set by incarnation 0"); !s) {
      return fail("set: " + s.error().message());
    }
    if (auto r = store.get("test/rank1-ready", 120s); !r) {
      return fail("waiting for rank 1: " + r.error().message());
    }
    std::printf("rank 0 incarnation 0: killing myself\n");
    std::fflush(stdout);
    std::raise(SIGKILL);
  }
  if (rank == "0") {
    auto before = store.get("test/before-kill", 5s);
    if (!before) return fail("the restarted rank 0 lost the key: " + before.error().message());
    std::printf("OK rank 0 incarnation %s read test/before-kill: %s\n", incarnation.c_str(),
                text(before.value()).c_str());
    if (auto s = store.set("test/after-restart", incarnation); !s) {
      return fail("set: " + s.error().message());
    }
    return 0;
  }
  if (auto s = store.set("test/rank1-ready", "1"); !s) return fail("set: " + s.error().message());
  auto after = store.get("test/after-restart", 120s);
  if (!after) return fail("waiting for the restarted rank 0: " + after.error().message());
  std::printf("OK rank 1 saw rank 0 incarnation %s on the same store connection\n",
              text(after.value()).c_str());
  return 0;
}
