// Real adapter, real bluetoothd: only where the kernel has a Bluetooth adapter. Not in CI.

#include <filesystem>
#include <optional>

#include <gtest/gtest.h>

#include "bridges/ble/bluez_client.hpp"
#include "io/reactor.hpp"

namespace vessel::bridges::ble {
namespace {

bool has_adapter() {
  std::error_code ec;
  const std::filesystem::path dir{"/sys/class/bluetooth"};
  return std::filesystem::is_directory(dir, ec) && !std::filesystem::is_empty(dir, ec);
}

TEST(ble_hardware, adapter_is_listed_and_discovery_starts_and_stops) {
  if (!has_adapter())
    GTEST_SKIP() << "no Bluetooth adapter (/sys/class/bluetooth is empty or absent)";
  io::reactor_config rc;
  rc.own_thread = false;
  io::reactor reactor{rc};
  ASSERT_TRUE(reactor.start());
  auto c = bluez_client::open(reactor);
  ASSERT_TRUE(c) << c.error().to_string();
  auto& client = *c.value();
  EXPECT_FALSE(client.adapter_path().empty());
  std::optional<ble_result<void>> started, stopped;
  client.start_discovery({}, [&](auto r) { started = std::move(r); });
  while (!started) reactor.run_once(std::chrono::milliseconds{10});
  ASSERT_TRUE(*started) << started->error().to_string();
  for (int i = 0; i < 200; ++i) reactor.run_once(std::chrono::milliseconds{10});
  client.stop_discovery([&](auto r) { stopped = std::move(r); });
  while (!stopped) reactor.run_once(std::chrono::milliseconds{10});
  EXPECT_TRUE(*stopped) << stopped->error().to_string();
  client.pump().shutdown();
  reactor.stop();
  while (reactor.run_once(std::chrono::milliseconds{10})) {
  }
}

}  // namespace
}  // namespace vessel::bridges::ble
