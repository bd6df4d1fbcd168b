// VESSEL_DEVICES as the bridges read it: the entries of one type, their options in order, and
// what uart's device_spec makes of them (ble's cases run in ble_sensor_run_test, where BlueZ is).

#include "bridges/device_entries.hpp"

#include <gtest/gtest.h>

#include "bridges/uart/device_spec.hpp"

namespace vessel::bridges {
namespace {

TEST(device_entries, picks_the_entries_of_one_type_with_their_options_in_order) {
  const auto e = device_entries("uart:port=/dev/a,baud=9600;ble:name=s;uart:;;uart", "uart");
  ASSERT_TRUE(e);
  ASSERT_EQ(e.value().size(), 3u);
  ASSERT_EQ(e.value()[0].size(), 2u);
  EXPECT_EQ(e.value()[0][0].key, "port");
  EXPECT_EQ(e.value()[0][0].value, "/dev/a");
  EXPECT_EQ(e.value()[0][1].key, "baud");
  EXPECT_EQ(e.value()[0][1].value, "9600");
  EXPECT_TRUE(e.value()[1].empty());
  EXPECT_TRUE(e.value()[2].empty());
  EXPECT_TRUE(device_entries("ble:name=s", "uart").value().empty());
  EXPECT_EQ(device_entries("uart:port", "uart").error(),
            std::make_error_code(std::errc::invalid_argument));
  EXPECT_TRUE(device_entries("ble:port", "uart")) << "another type's entry is not ours to judge";
}

TEST(device_entries, uart_entries_become_device_configs_and_bad_ones_are_refused) {
  const auto ok =
      uart::parse_uart_devices("uart:port=/dev/a,baud=9600,framing=vessel;uart:port=/dev/b,name=x");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok.value().size(), 2u);
  EXPECT_EQ(ok.value()[0].name, "uart0");
  EXPECT_EQ(ok.value()[0].link.serial.path, "/dev/a");
  EXPECT_EQ(ok.value()[0].link.serial.baud, 9600u);
  EXPECT_FALSE(ok.value()[0].link.reliable);
  EXPECT_EQ(ok.value()[1].name, "x");
  for (const char* bad : {"uart:baud=9600", "uart:port=/dev/a,baud=0", "uart:port=/dev/a,baud=9k",
                          "uart:port=/dev/a,framing=odd", "uart:port=/dev/a,name=",
                          "uart:port=/dev/a,parity=even", "uart:port"}) {
    EXPECT_FALSE(uart::parse_uart_devices(bad)) << bad;
  }
}

}  // namespace
}  // namespace vessel::bridges
