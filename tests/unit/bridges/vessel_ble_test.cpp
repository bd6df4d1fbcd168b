// vessel-ble (tools/vessel_ble) run as a process against the BlueZ emulation on a private bus.

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "ble_fixture.hpp"

#ifndef VESSEL_BLE_BIN
#error "VESSEL_BLE_BIN must name the vessel-ble binary"
#endif

namespace vessel::bridges::ble::testing {
namespace {

using namespace std::chrono_literals;

struct run_result {
  int status = -1;
  std::string out;
};

/// Runs vessel-ble with `args` (stderr folded into the output) while `meanwhile()` is called every
/// 20 ms, until it exits.
run_result run_tool(const std::string& args, const std::function<void()>& meanwhile = {}) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::execl("/bin/sh", "sh", "-c", (std::string{VESSEL_BLE_BIN} + " " + args).c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  run_result r;
  const auto end = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    std::array<char, 512> buf{};
    ssize_t n;
    while ((n = ::read(fds[0], buf.data(), buf.size())) > 0)
      r.out.append(buf.data(), static_cast<std::size_t>(n));
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      while ((n = ::read(fds[0], buf.data(), buf.size())) > 0)
        r.out.append(buf.data(), static_cast<std::size_t>(n));
      r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    if (meanwhile) meanwhile();
    std::this_thread::sleep_for(20ms);
  }
  ::close(fds[0]);
  return r;
}

using vessel_ble_tool = ble_env;

TEST_F(vessel_ble_tool, scan_lists_the_known_device_and_the_advertiser) {
  const auto r = run_tool("scan --timeout 0.5");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(std::string{known_addr} + " MockSensor - 0000180f-"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(std::string{nus_addr} + " MockBoard -50 6e400001-"), std::string::npos)
      << r.out;
  const auto filtered = run_tool("scan --timeout 0.3 --uuid 180f");
  EXPECT_EQ(filtered.out.find(nus_addr), std::string::npos) << filtered.out;
}

TEST_F(vessel_ble_tool, read_prints_hex_and_write_reaches_the_characteristic) {
  const auto r = run_tool(std::string{"read "} + known_addr + " 2a19");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "57\n");
  const auto w = run_tool(std::string{"write "} + nus_addr +
                          " 6e400002-b5a3-f393-e0a9-e50e24dcca9e 0102ff --no-response");
  ASSERT_EQ(w.status, 0) << w.out;
  EXPECT_EQ(written(std::string{nus_dev} + "/service000a/char000b"),
            (std::vector<std::vector<std::uint8_t>>{{1, 2, 0xff}}));
}

TEST_F(vessel_ble_tool, notify_prints_one_line_per_notification_up_to_count) {
  const std::string level = std::string{known_dev} + "/service0010/char0011";
  std::uint8_t next = 0x2a;
  const auto r =
      run_tool(std::string{"notify "} + known_addr + " 2a19 --count 2 --timeout 10", [&] {
        bool delivered = false;
        mock_proxy_->callMethod("EmitNotification")
            .onInterface("org.bluez.Mock")
            .withArguments(sdbus::ObjectPath{level}, std::vector<std::uint8_t>{next})
            .storeResultsTo(delivered);
        if (delivered) ++next;
      });
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.substr(0, 6), "2a\n2b\n") << r.out;
}

TEST_F(vessel_ble_tool, errors_and_usage) {
  const auto missing = run_tool(std::string{"read "} + known_addr + " ffff");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.out.find("characteristic not found"), std::string::npos) << missing.out;
  EXPECT_NE(missing.out.find(known_addr), std::string::npos) << missing.out;
  EXPECT_EQ(run_tool("write " + std::string{nus_addr} + " 2a19 xyz").status, 2);
  EXPECT_EQ(run_tool("frobnicate").status, 2);
  const auto timed_out =
      run_tool(std::string{"notify "} + known_addr + " 2a19 --count 1 --timeout 0.3");
  EXPECT_EQ(timed_out.status, 3) << timed_out.out;
}

}  // namespace
}  // namespace vessel::bridges::ble::testing
