// bluez_client against the BlueZ emulation: discovery (new and already-known devices, filters),
// connect then ServicesResolved in bluetoothd's order, read, write both ways, notifications,
// error mapping with device and characteristic named, adapter selection.

#include <optional>
#include <string>
#include <vector>

#include "ble_fixture.hpp"
#include "bridges/ble/errc.hpp"

namespace vessel::bridges::ble::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* nus_rx = "/org/bluez/hci0/dev_C0_FF_EE_00_00_01/service000a/char000b";
constexpr const char* nus_tx = "/org/bluez/hci0/dev_C0_FF_EE_00_00_01/service000a/char000d";

class ble_client : public ble_env {
 protected:
  void connect(const std::string& dev) {
    std::optional<ble_result<void>> r;
    client_->connect(dev, 5s, [&](ble_result<void> res) { r = std::move(res); });
    ASSERT_TRUE(run_until([&] { return r.has_value(); }));
    ASSERT_TRUE(*r) << r->error().to_string();
    ASSERT_TRUE(run_until([&] {
      auto d = client_->device(dev);
      return d && d->services_resolved;
    }));
  }
  void discover_nus() {
    std::optional<ble_result<void>> r;
    client_->start_discovery({}, [&](ble_result<void> res) { r = std::move(res); });
    ASSERT_TRUE(run_until([&] { return client_->device(nus_dev).has_value(); }));
  }
};

TEST_F(ble_client, known_device_is_listed_before_any_discovery_and_staged_one_after) {
  EXPECT_EQ(client_->adapter_path(), "/org/bluez/hci0");
  const auto before = client_->devices();
  ASSERT_EQ(before.size(), 1u);  // the bonded device; the advertiser is not seen yet
  EXPECT_EQ(before[0].address, known_addr);
  EXPECT_TRUE(before[0].paired);
  EXPECT_FALSE(before[0].rssi.has_value());

  std::vector<std::string> announced;
  client_->on_device([&](const device_info& d) { announced.push_back(d.address); });
  discover_nus();
  ASSERT_FALSE(announced.empty());
  EXPECT_EQ(announced.front(), nus_addr);
  const auto d = client_->device(nus_dev);
  EXPECT_EQ(d->name, "MockBoard");
  ASSERT_TRUE(d->rssi.has_value());
  EXPECT_EQ(*d->rssi, -50);
}

TEST_F(ble_client, the_adapter_asked_for_is_used_and_a_missing_one_is_a_typed_error) {
  mock("AddAdapter", std::string{"hci1"}, std::string{"second"});
  auto second = bluez_client::open(*reactor_, "hci1");
  ASSERT_TRUE(second) << second.error().to_string();
  EXPECT_EQ(second.value()->adapter_path(), "/org/bluez/hci1");
  EXPECT_EQ(second.value()->adapters().size(), 2u);
  EXPECT_TRUE(second.value()->devices().empty());  // the known device belongs to hci0
  bool released = false;  // its cancelled poll must complete before it goes
  second.value()->pump().shutdown([&] { released = true; });
  ASSERT_TRUE(run_until([&] { return released; }));

  const auto missing = bluez_client::open(*reactor_, "hci7");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::no_adapter);
}

TEST_F(ble_client, scan_filter_matches_name_address_and_service_uuid) {
  discover_nus();
  EXPECT_EQ(client_->devices({"MockBoard", {}, {}}).size(), 1u);
  EXPECT_EQ(client_->devices({{}, "c0:ff:ee:00:00:02", {}}).size(), 1u);
  EXPECT_EQ(client_->devices({{}, {}, {"6E400001-B5A3-F393-E0A9-E50E24DCCA9E"}}).size(), 1u);
  EXPECT_EQ(client_->devices({{}, {}, {"180f"}}).front().address, known_addr);
  EXPECT_TRUE(client_->devices({"nobody", {}, {}}).empty());
}

TEST_F(ble_client, services_resolve_after_connect_and_gatt_objects_precede_the_flag) {
  discover_nus();
  std::vector<std::string> order;
  client_->on_device([&](const device_info& d) {
    if (d.path != nus_dev) return;
    const bool has_chars = !client_->characteristics(nus_dev).empty();
    order.push_back(std::string{d.connected ? "C" : "c"} + (d.services_resolved ? "R" : "r") +
                    (has_chars ? "G" : "g"));
  });
  connect(nus_dev);
  ASSERT_GE(order.size(), 2u);
  EXPECT_EQ(order.front(), "Crg");  // Connected first, no GATT objects yet
  EXPECT_EQ(order.back(), "CRG");   // ServicesResolved after the objects were exported
  const auto rx = client_->characteristic(nus_dev, "6e400002-b5a3-f393-e0a9-e50e24dcca9e");
  ASSERT_TRUE(rx);
  EXPECT_EQ(rx->path, nus_rx);
  EXPECT_EQ(rx->mtu, 247);
}

TEST_F(ble_client, read_write_and_notify) {
  discover_nus();
  connect(nus_dev);
  std::optional<ble_result<std::vector<std::uint8_t>>> read;
  std::vector<std::vector<std::uint8_t>> notes;
  client_->on_value([&](const std::string& path, std::span<const std::uint8_t> v) {
    if (path == nus_tx) notes.emplace_back(v.begin(), v.end());
  });
  client_->read(nus_tx, [&](auto r) { read = std::move(r); });
  ASSERT_TRUE(run_until([&] { return read.has_value(); }));
  ASSERT_TRUE(*read);
  EXPECT_EQ(read->value(), (std::vector<std::uint8_t>{'h', 'e', 'l', 'l', 'o'}));
  EXPECT_TRUE(notes.empty()) << "the Value change of a read is not a notification";

  std::optional<ble_result<void>> sub;
  client_->start_notify(nus_tx, [&](auto r) { sub = std::move(r); });
  ASSERT_TRUE(run_until([&] { return sub.has_value(); }));
  ASSERT_TRUE(*sub);

  int writes = 0;
  const std::vector<std::uint8_t> a{1, 2, 3}, b{4, 5};
  client_->write(nus_rx, a, false, [&](auto r) {
    EXPECT_TRUE(r);
    ++writes;
  });
  client_->write(nus_rx, b, true, [&](auto r) {
    EXPECT_TRUE(r);
    ++writes;
  });
  ASSERT_TRUE(run_until([&] { return writes == 2 && notes.size() == 2; }));
  EXPECT_EQ(notes[0], a);
  EXPECT_EQ(notes[1], b);
  EXPECT_EQ(written(nus_rx), (std::vector<std::vector<std::uint8_t>>{a, b}));

  mock("EmitNotification", sdbus::ObjectPath{nus_tx}, std::vector<std::uint8_t>{9});
  ASSERT_TRUE(run_until([&] { return notes.size() == 3; }));
  EXPECT_EQ(notes[2], std::vector<std::uint8_t>{9});
}

TEST_F(ble_client, bluez_errors_map_to_typed_errors_naming_device_and_characteristic) {
  discover_nus();
  connect(nus_dev);
  std::optional<ble_result<void>> r;
  const std::vector<std::uint8_t> one{1};
  client_->write(nus_tx, one, true, [&](auto res) { r = std::move(res); });  // TX has no write flag
  ASSERT_TRUE(run_until([&] { return r.has_value(); }));
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().code, errc::not_permitted);
  EXPECT_EQ(r->error().device, nus_addr);
  EXPECT_EQ(r->error().characteristic, "6e400003-b5a3-f393-e0a9-e50e24dcca9e");
  EXPECT_NE(r->error().to_string().find("org.bluez.Error.NotPermitted"), std::string::npos);

  r.reset();
  client_->connect(nus_dev, 5s, [&](auto res) { r = std::move(res); });
  ASSERT_TRUE(run_until([&] { return r.has_value(); }));
  EXPECT_EQ(r->error().code, errc::already_connected);

  EXPECT_EQ(errc_from_dbus_name("org.bluez.Error.InProgress"), errc::in_progress);
  EXPECT_EQ(errc_from_dbus_name("org.bluez.Error.NotConnected"), errc::not_connected);
  EXPECT_EQ(errc_from_dbus_name("org.bluez.Error.Something"), errc::bluez_other);
}

TEST_F(ble_client, bonded_device_reads_its_encrypted_characteristic) {
  connect(known_dev);  // bonded in the emulation: reads succeed
  const auto secret = client_->characteristic(known_dev, "2a3d");
  ASSERT_TRUE(secret);
  std::optional<ble_result<std::vector<std::uint8_t>>> read;
  client_->read(secret->path, [&](auto r) { read = std::move(r); });
  ASSERT_TRUE(run_until([&] { return read.has_value(); }));
  ASSERT_TRUE(*read) << read->error().to_string();
  EXPECT_EQ(read->value().size(), 6u);
}

TEST_F(ble_client, link_loss_removes_gatt_objects_then_clears_connected) {
  discover_nus();
  connect(nus_dev);
  std::vector<std::string> removed;
  client_->on_removed([&](const std::string& p) { removed.push_back(p); });
  bool disconnected = false;
  client_->on_device([&](const device_info& d) {
    if (d.path == nus_dev && !d.connected) {
      disconnected = true;
      EXPECT_EQ(removed.size(), 3u) << "GATT objects go before Connected=false";
    }
  });
  mock("DropConnection", sdbus::ObjectPath{nus_dev});
  ASSERT_TRUE(run_until([&] { return disconnected; }));
  EXPECT_FALSE(client_->characteristic(nus_dev, "6e400002-b5a3-f393-e0a9-e50e24dcca9e"));
}

}  // namespace
}  // namespace vessel::bridges::ble::testing
