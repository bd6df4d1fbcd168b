#pragma once
// Kills the ranks' TCP connection from outside, the way a failing network or an operator would
// (`ss -K`, the kernel destroys the sockets), until the scenario says it has seen what it needed.
// Header-only: the p2p and collective fault tests share it.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "actors/errc.hpp"
#include "actors/kv_store_client.hpp"

namespace vessel::test {

/// True when this host can destroy sockets with `ss -K` (iproute2, CONFIG_INET_DIAG_DESTROY).
inline bool ss_kill_available() {
  return std::system("ss -K dst 127.0.0.1 dport = 1 > /dev/null 2>&1") == 0;
}

/// Kills every established loopback connection to or from rank 0's TCP listener (rank 1 dials
/// rank 0 there) every `period`, until `done_key` appears in the store (or the store is gone with
/// rank 0) or `rounds` pass. Adds the rounds that killed a connection to `kills`. Call it from
/// launch_ranks' on_started.
inline void ss_kill_until(std::uint16_t store_port, const std::string& done_key,
                          std::chrono::milliseconds period, int rounds, int& kills) {
  using namespace std::chrono_literals;
  auto store = actors::kv_store_client::connect(actors::endpoint{"127.0.0.1", store_port}, 30s);
  ASSERT_TRUE(store) << store.error().detail;
  auto record = store.value()->get("vessel/mesh/addr/0", 30s);
  ASSERT_TRUE(record) << record.error().detail;
  const std::string text(reinterpret_cast<const char*>(record.value().data()),
                         record.value().size());
  const auto colon = text.find(':', text.find("tcp="));
  ASSERT_NE(colon, std::string::npos) << text;
  const std::string port = std::to_string(std::stoi(text.substr(colon + 1)));
  const std::string cmd = "ss -K '( dport = " + port + " or sport = " + port +
                          " )' dst 127.0.0.1 2>/dev/null | grep -c ESTAB > /dev/null";
  for (int round = 0; round < rounds; ++round) {
    auto done = store.value()->get(done_key, period);
    if (done || done.error().code != actors::make_error_code(actors::errc::store_timeout)) break;
    kills += std::system(cmd.c_str()) == 0 ? 1 : 0;
  }
}

}  // namespace vessel::test
