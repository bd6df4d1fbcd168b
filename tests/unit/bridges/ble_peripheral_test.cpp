// The peripheral engine and the NUS byte stream against the BlueZ emulation: first connect through
// discovery, link loss mid-stream -> reconnect with backoff, re-subscribe, payload size re-read,
// outage reported; a request during an outage retried, or failed with a typed error at its
// deadline; pairing on demand; NUS round trip with fragmentation and serial frames; a device
// found by name and service; a connect whose services do not resolve in time; unsubscribe.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "ble_fixture.hpp"
#include "bridges/ble/nus_stream.hpp"
#include "bridges/ble/peripheral.hpp"

namespace vessel::bridges::ble::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* battery_level = "2a19";

class ble_peripheral : public ble_env {
 protected:
  void extra_teardown() override {
    stream_.reset();
    dev_.reset();
  }

  peripheral_config config(const char* addr) {
    peripheral_config c;
    c.address = addr;
    c.connect_timeout = 3s;
    c.request_timeout = 5s;
    c.reconnect = io::reconnect_policy{20ms, 200ms, 2.0, 0, false};
    return c;
  }

  void start(const char* addr) {
    dev_ = std::make_unique<peripheral>(*client_, config(addr));
    std::optional<ble_result<void>> ready;
    dev_->start([&](ble_result<void> r) { ready = std::move(r); });
    ASSERT_TRUE(run_until([&] { return ready.has_value(); }));
    ASSERT_TRUE(*ready) << ready->error().to_string();
    ASSERT_EQ(dev_->state(), link_state::ready);
  }

  std::unique_ptr<peripheral> dev_;
  std::unique_ptr<nus_stream> stream_;
};

TEST_F(ble_peripheral, finds_an_advertiser_by_discovery_and_a_bonded_device_without) {
  start(nus_addr);
  EXPECT_EQ(dev_->device_path(), nus_dev);
  EXPECT_EQ(dev_->payload_size(), 244u);  // ATT MTU 247 - 3
  EXPECT_EQ(dev_->counters().connects, 1u);
  dev_->close();
  dev_.reset();
  start(known_addr);
  std::optional<ble_result<std::vector<std::uint8_t>>> level;
  dev_->read(battery_level, [&](auto r) { level = std::move(r); });
  ASSERT_TRUE(run_until([&] { return level.has_value(); }));
  ASSERT_TRUE(*level);
  EXPECT_EQ(level->value(), std::vector<std::uint8_t>{87});
}

TEST_F(ble_peripheral, unknown_address_fails_start_with_device_not_found) {
  auto c = config("C0:FF:EE:99:99:99");
  c.discovery_timeout = 300ms;
  dev_ = std::make_unique<peripheral>(*client_, c);
  std::optional<ble_result<void>> ready;
  dev_->start([&](ble_result<void> r) { ready = std::move(r); });
  ASSERT_TRUE(run_until([&] { return ready.has_value(); }));
  ASSERT_FALSE(*ready);
  EXPECT_EQ(ready->error().code, errc::device_not_found);
  EXPECT_EQ(ready->error().device, "C0:FF:EE:99:99:99");
}

TEST_F(ble_peripheral, finds_a_device_by_name_among_those_advertising_a_service) {
  auto c = config("");
  c.name = "MockSensor";
  c.services = {"180f"};
  dev_ = std::make_unique<peripheral>(*client_, c);
  EXPECT_EQ(dev_->label(), "MockSensor");  // errors name the device by name until it is found
  std::optional<ble_result<void>> ready;
  dev_->start([&](ble_result<void> r) { ready = std::move(r); });
  ASSERT_TRUE(run_until([&] { return ready.has_value(); }));
  ASSERT_TRUE(*ready) << ready->error().to_string();
  EXPECT_EQ(dev_->device_path(), known_dev);
  EXPECT_EQ(dev_->label(), known_addr);

  // The right name with a service it does not advertise is another device: none is found.
  dev_->close();
  dev_.reset();
  ready.reset();
  c.services = {"180d"};
  c.discovery_timeout = 300ms;
  dev_ = std::make_unique<peripheral>(*client_, c);
  dev_->start([&](ble_result<void> r) { ready = std::move(r); });
  ASSERT_TRUE(run_until([&] { return ready.has_value(); }));
  ASSERT_FALSE(*ready);
  EXPECT_EQ(ready->error().code, errc::device_not_found);
  EXPECT_EQ(ready->error().device, "MockSensor");
}

TEST_F(ble_peripheral, a_link_whose_services_do_not_resolve_in_time_fails_start_with_timeout) {
  mock("SetResolveDelay", 10'000u);  // Connect succeeds, ServicesResolved comes 10 s later
  auto c = config(known_addr);
  c.connect_timeout = 300ms;
  dev_ = std::make_unique<peripheral>(*client_, c);
  std::optional<ble_result<void>> ready;
  dev_->start([&](ble_result<void> r) { ready = std::move(r); });
  ASSERT_TRUE(run_until([&] { return ready.has_value(); }));
  ASSERT_FALSE(*ready);
  EXPECT_EQ(ready->error().code, errc::timeout);
  EXPECT_EQ(ready->error().device, known_addr);
  EXPECT_EQ(dev_->state(), link_state::idle);
  // The half-made link is dropped (Disconnect), not left for BlueZ to keep.
  ASSERT_TRUE(run_until([&] { return client_->device(known_dev) && !client_->device(known_dev)->connected; }));
}

TEST_F(ble_peripheral, unsubscribe_stops_notifications) {
  start(known_addr);
  std::vector<std::uint8_t> got;
  std::optional<ble_result<void>> sub;
  dev_->subscribe(
      battery_level,
      [&](std::span<const std::uint8_t> v) { got.insert(got.end(), v.begin(), v.end()); },
      [&](auto r) { sub = std::move(r); });
  ASSERT_TRUE(run_until([&] { return sub.has_value(); }));
  ASSERT_TRUE(*sub);
  const sdbus::ObjectPath level{std::string{known_dev} + "/service0010/char0011"};
  mock("EmitNotification", level, std::vector<std::uint8_t>{60});
  ASSERT_TRUE(run_until([&] { return got.size() == 1; }));

  std::optional<ble_result<void>> unsub;
  dev_->unsubscribe(battery_level, [&](auto r) { unsub = std::move(r); });
  ASSERT_TRUE(run_until([&] { return unsub.has_value(); }));
  ASSERT_TRUE(*unsub) << unsub->error().to_string();
  // BlueZ stopped notifying (StopNotify reached it): the peripheral's next value goes nowhere.
  ASSERT_TRUE(run_until([&] {
    const auto ch = client_->characteristic(known_dev, battery_level);
    return ch && !ch->notifying;
  }));
  bool delivered = true;
  mock_proxy_->callMethod("EmitNotification")
      .onInterface("org.bluez.Mock")
      .withArguments(level, std::vector<std::uint8_t>{61})
      .storeResultsTo(delivered);
  EXPECT_FALSE(delivered);
  EXPECT_EQ(got, std::vector<std::uint8_t>{60});
  EXPECT_EQ(dev_->counters().notifications, 1u);
}

TEST_F(ble_peripheral, link_loss_reconnects_resubscribes_and_reports_the_outage) {
  start(known_addr);
  std::vector<std::uint8_t> got;
  std::optional<ble_result<void>> sub;
  dev_->subscribe(
      battery_level,
      [&](std::span<const std::uint8_t> v) { got.insert(got.end(), v.begin(), v.end()); },
      [&](auto r) { sub = std::move(r); });
  ASSERT_TRUE(run_until([&] { return sub.has_value(); }));
  ASSERT_TRUE(*sub);
  const auto level = dev_->device_path() + "/service0010/char0011";
  mock("EmitNotification", sdbus::ObjectPath{level}, std::vector<std::uint8_t>{50});
  ASSERT_TRUE(run_until([&] { return got.size() == 1; }));

  std::vector<outage_event> outages;
  dev_->on_outage([&](const outage_event& e) { outages.push_back(e); });
  mock("SetMtu", std::uint16_t{100});  // the next link negotiates a smaller MTU
  mock("FailNextConnects", sdbus::ObjectPath{known_dev}, 2u, std::string{"Failed"});
  mock("DropConnection", sdbus::ObjectPath{known_dev});
  ASSERT_TRUE(run_until([&] { return outages.size() == 2; }));
  EXPECT_FALSE(outages[0].restored);
  EXPECT_EQ(outages[0].reason, "services no longer resolved");  // bluetoothd clears that flag first
  EXPECT_TRUE(outages[1].restored);
  EXPECT_EQ(dev_->state(), link_state::ready);
  EXPECT_EQ(dev_->payload_size(), 97u);
  EXPECT_EQ(dev_->counters().reconnects, 1u);
  EXPECT_EQ(dev_->counters().disconnects, 1u);
  EXPECT_GE(dev_->counters().errors, 2u);  // the two refused connects

  // Re-subscribed without being asked: the peripheral's next notification arrives.
  bool delivered = false;
  ASSERT_TRUE(run_until([&] {
    sdbus::ObjectPath p{level};
    mock_proxy_->callMethod("EmitNotification")
        .onInterface("org.bluez.Mock")
        .withArguments(p, std::vector<std::uint8_t>{51})
        .storeResultsTo(delivered);
    run_for(10ms);
    return delivered;
  }));
  ASSERT_TRUE(run_until([&] { return got.size() == 2; }));
  EXPECT_EQ(got, (std::vector<std::uint8_t>{50, 51}));
  EXPECT_EQ(dev_->counters().notifications, 2u);
}

TEST_F(ble_peripheral, request_made_during_an_outage_waits_for_the_link) {
  start(known_addr);
  mock("FailNextConnects", sdbus::ObjectPath{known_dev}, 3u, std::string{"Failed"});
  mock("DropConnection", sdbus::ObjectPath{known_dev});
  ASSERT_TRUE(run_until([&] { return dev_->state() == link_state::outage; }));
  std::optional<ble_result<std::vector<std::uint8_t>>> level;
  dev_->read(battery_level, [&](auto r) { level = std::move(r); });
  ASSERT_TRUE(run_until([&] { return level.has_value(); }));
  ASSERT_TRUE(*level) << level->error().to_string();
  EXPECT_EQ(level->value(), std::vector<std::uint8_t>{87});
  EXPECT_EQ(dev_->counters().reconnects, 1u);
}

TEST_F(ble_peripheral, request_in_flight_when_the_link_drops_is_resent_after_the_reconnect) {
  start(known_addr);
  mock("DropOnNextAccess", sdbus::ObjectPath{known_dev});  // the read's link dies under it
  std::optional<ble_result<std::vector<std::uint8_t>>> level;
  dev_->read(battery_level, [&](auto r) { level = std::move(r); });
  ASSERT_TRUE(run_until([&] { return level.has_value(); }));
  ASSERT_TRUE(*level) << level->error().to_string();
  EXPECT_EQ(level->value(), std::vector<std::uint8_t>{87});
  EXPECT_EQ(dev_->counters().retries, 1u);
  EXPECT_EQ(dev_->counters().reconnects, 1u);
}

TEST_F(ble_peripheral, request_fails_with_link_lost_when_the_link_stays_down) {
  auto c = config(known_addr);
  c.request_timeout = 300ms;
  dev_ = std::make_unique<peripheral>(*client_, c);
  std::optional<ble_result<void>> ready;
  dev_->start([&](ble_result<void> r) { ready = std::move(r); });
  ASSERT_TRUE(run_until([&] { return ready.has_value(); }));
  mock("FailNextConnects", sdbus::ObjectPath{known_dev}, 1000u, std::string{"Failed"});
  mock("DropConnection", sdbus::ObjectPath{known_dev});
  ASSERT_TRUE(run_until([&] { return dev_->state() == link_state::outage; }));
  std::optional<ble_result<std::vector<std::uint8_t>>> level;
  dev_->read(battery_level, [&](auto r) { level = std::move(r); });
  ASSERT_TRUE(run_until([&] { return level.has_value(); }));
  ASSERT_FALSE(*level);
  EXPECT_EQ(level->error().code, errc::link_lost);
  EXPECT_EQ(level->error().device, known_addr);
  EXPECT_EQ(level->error().characteristic, "00002a19-0000-1000-8000-00805f9b34fb");
}

TEST_F(ble_peripheral, pairs_when_a_characteristic_requires_it) {
  const std::string addr = "C0:FF:EE:00:00:03";
  sdbus::ObjectPath dev, svc, ch;
  mock_proxy_->callMethod("AddAdvertisingDevice")
      .onInterface("org.bluez.Mock")
      .withArguments(std::string{"hci0"}, addr, std::string{"Locked"}, std::vector<std::string>{},
                     std::int16_t{-60})
      .storeResultsTo(dev);
  mock_proxy_->callMethod("AddGattService")
      .onInterface("org.bluez.Mock")
      .withArguments(dev, std::uint16_t{0x20}, std::string{"0000fff0-0000-1000-8000-00805f9b34fb"},
                     true)
      .storeResultsTo(svc);
  mock_proxy_->callMethod("AddGattCharacteristic")
      .onInterface("org.bluez.Mock")
      .withArguments(svc, std::uint16_t{0x21}, std::string{"0000fff1-0000-1000-8000-00805f9b34fb"},
                     std::vector<std::string>{"encrypt-read"}, std::vector<std::uint8_t>{7, 7})
      .storeResultsTo(ch);
  start(addr.c_str());
  std::optional<ble_result<std::vector<std::uint8_t>>> v;
  dev_->read("fff1", [&](auto r) { v = std::move(r); });
  ASSERT_TRUE(run_until([&] { return v.has_value(); }));
  ASSERT_TRUE(*v) << v->error().to_string();
  EXPECT_EQ(v->value(), (std::vector<std::uint8_t>{7, 7}));
  EXPECT_TRUE(client_->device(std::string{dev})->paired);
}

TEST_F(ble_peripheral, nus_stream_fragments_to_the_payload_size_and_carries_serial_frames) {
  mock("SetMtu", std::uint16_t{23});  // 20-byte writes: a 200-byte frame takes 11 chunks
  start(nus_addr);
  ASSERT_EQ(dev_->payload_size(), 20u);
  stream_ = std::make_unique<nus_stream>(*dev_);
  std::vector<std::vector<std::byte>> frames;
  stream_->on_frame([&](std::span<const std::byte> f) { frames.emplace_back(f.begin(), f.end()); });
  std::optional<ble_result<void>> opened;
  stream_->open([&](auto r) { opened = std::move(r); });
  ASSERT_TRUE(run_until([&] { return opened.has_value(); }));
  ASSERT_TRUE(*opened);

  std::vector<std::vector<std::byte>> sent;
  int done = 0;
  for (int i = 0; i < 20; ++i) {
    std::vector<std::byte> payload(static_cast<std::size_t>(10 * i + 1));
    for (std::size_t j = 0; j < payload.size(); ++j)
      payload[j] = std::byte(static_cast<unsigned>(i * 7 + j));
    stream_->send_frame(payload, [&](auto r) {
      EXPECT_TRUE(r);
      ++done;
    });
    sent.push_back(std::move(payload));
  }
  ASSERT_TRUE(run_until([&] { return done == 20 && frames.size() == 20; }));
  EXPECT_EQ(frames, sent);
  const auto chunks = written(dev_->device_path() + "/service000a/char000b");
  for (const auto& c : chunks) EXPECT_LE(c.size(), 20u);
  EXPECT_EQ(chunks.size(), stream_->counters().chunks_out);
  EXPECT_GT(chunks.size(), 20u);
  EXPECT_EQ(stream_->decoder().counters().crc_errors, 0u);
}

}  // namespace
}  // namespace vessel::bridges::ble::testing
