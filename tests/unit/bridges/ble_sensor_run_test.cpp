// A BLE device in a topology file, end to end: vessel-run --topology with
// examples/topologies/ble-sensor.toml (the device moved to the BlueZ emulation's peripherals) runs
// examples/ble_sensor on a private bus. The rank the file gives a ble device reads VESSEL_DEVICES
// (parse_ble_devices), spawns the peripheral's device actor (make_ble_device_child) and serves the
// other rank's reads; the values that come back are the emulated peripheral's. Plus the parsing of
// VESSEL_DEVICES' ble entries.

#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ble_fixture.hpp"
#include "bridges/ble/device_spec.hpp"

#ifndef VESSEL_RUN_PATH
#error "VESSEL_RUN_PATH must name vessel-run"
#endif
#ifndef BLE_SENSOR_PATH
#error "BLE_SENSOR_PATH must name the ble_sensor example"
#endif

namespace vessel::bridges::ble::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string slurp(const fs::path& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ble_sensor_run : public ble_env {
 protected:
  void extra_teardown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  /// The example topology with `edits` (text -> replacement) made; vessel-run's exit status, its
  /// output in out_.
  int run(const std::vector<std::pair<std::string, std::string>>& edits,
          const std::vector<std::string>& args) {
    char pattern[] = "/tmp/vessel-ble-run-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) return -1;
    dir_ = pattern;
    auto topology = slurp(fs::path{VESSEL_SOURCE_DIR} / "examples/topologies/ble-sensor.toml");
    for (const auto& [original, replacement] : edits) {
      const auto at = topology.find(original);
      if (at == std::string::npos) {
        ADD_FAILURE() << "the example topology has no " << original;
        return -1;
      }
      topology.replace(at, original.size(), replacement);
    }
    std::ofstream{dir_ / "ble-sensor.toml"} << topology;

    std::vector<std::string> argv{VESSEL_RUN_PATH, "--topology", (dir_ / "ble-sensor.toml").string(),
                                  BLE_SENSOR_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto out = dir_ / "run.out";
    const pid_t pid = ::fork();
    if (pid == 0) {
      // DBUS_SYSTEM_BUS_ADDRESS (the fixture's private bus) reaches the ranks through vessel-run.
      if (!std::freopen(out.c_str(), "w", stdout) || ::dup2(1, 2) < 0) ::_exit(99);
      std::vector<char*> args_c;
      for (auto& a : argv) args_c.push_back(a.data());
      args_c.push_back(nullptr);
      ::execv(args_c[0], args_c.data());
      ::_exit(98);
    }
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (::waitpid(pid, &status, WNOHANG) != pid) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        ADD_FAILURE() << "vessel-run did not end within 120 s";
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    out_ = slurp(out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  fs::path dir_;
  std::string out_;
};

TEST_F(ble_sensor_run, a_rank_reads_a_sensor_another_rank_finds_by_name_and_service) {
  // The emulated bonded sensor: BlueZ knows it (it never advertises), battery level 87 = 0x57.
  ASSERT_EQ(run({{"\"vessel-sensor\"", "\"MockSensor\""}}, {"--reads", "2"}), 0) << out_;
  EXPECT_NE(out_.find("owns ble device 'ble0' (name MockSensor)"), std::string::npos) << out_;
  EXPECT_NE(out_.find("rank 0: 2a19 = 57 (read #0 through rank 1)"), std::string::npos) << out_;
  EXPECT_NE(out_.find("rank 0: 2a19 = 57 (read #1 through rank 1)"), std::string::npos) << out_;
  EXPECT_NE(out_.find("served 2 reads: link ready, payload size 244, connects 1"), std::string::npos)
      << out_;
  EXPECT_NE(out_.find("OK ble_sensor rank 0"), std::string::npos) << out_;
  EXPECT_NE(out_.find("OK ble_sensor rank 1"), std::string::npos) << out_;
}

TEST_F(ble_sensor_run, a_rank_reads_a_board_another_rank_discovers_by_address) {
  // The emulated NUS board advertises (BlueZ learns of it by discovery); its TX reads "hello".
  const std::vector<std::pair<std::string, std::string>> edits{
      {"name = \"vessel-sensor\"", std::string{"address = \""} + nus_addr + "\""},
      {"[\"180f\"]", "[\"6e400001-b5a3-f393-e0a9-e50e24dcca9e\"]"}};
  ASSERT_EQ(run(edits, {"--read", "6e400003-b5a3-f393-e0a9-e50e24dcca9e", "--reads", "1"}), 0)
      << out_;
  EXPECT_NE(out_.find(std::string{"owns ble device 'ble0' (address "} + nus_addr + ")"),
            std::string::npos)
      << out_;
  EXPECT_NE(out_.find("= 68656c6c6f (read #0 through rank 1)"), std::string::npos) << out_;
  EXPECT_NE(out_.find("OK ble_sensor rank 0"), std::string::npos) << out_;
}

TEST(ble_device_spec, ble_entries_become_device_configs) {
  auto d = parse_ble_devices(
      "uart:port=/dev/ttyUSB0;ble:name=vessel-sensor,services=180d+180F;gpu:index=0;"
      "ble:address=C0:FF:EE:00:00:01");
  ASSERT_TRUE(d) << d.error().message();
  ASSERT_EQ(d.value().size(), 2u);
  const auto& a = d.value()[0];
  EXPECT_EQ(a.name, "ble0");
  EXPECT_EQ(a.peripheral.name, "vessel-sensor");
  EXPECT_EQ(a.peripheral.address, "");
  EXPECT_EQ(a.peripheral.services,
            (std::vector<std::string>{"0000180d-0000-1000-8000-00805f9b34fb",
                                      "0000180f-0000-1000-8000-00805f9b34fb"}));
  const auto& b = d.value()[1];
  EXPECT_EQ(b.name, "ble1");
  EXPECT_EQ(b.peripheral.address, "C0:FF:EE:00:00:01");
  EXPECT_TRUE(b.peripheral.services.empty());
  EXPECT_TRUE(parse_ble_devices("").value().empty());
  EXPECT_TRUE(parse_ble_devices("uart:port=/dev/ttyUSB0").value().empty());
}

TEST(ble_device_spec, bad_entries_are_refused) {
  for (const char* bad : {"ble:", "ble:name=a,address=C0:FF:EE:00:00:01", "ble:name=",
                          "ble:address=x,colour=red", "ble:name=a,services=180d++180f",
                          "ble:name"}) {
    const auto d = parse_ble_devices(bad);
    ASSERT_FALSE(d) << bad;
    EXPECT_EQ(d.error(), std::errc::invalid_argument) << bad;
  }
}

}  // namespace
}  // namespace vessel::bridges::ble::testing
