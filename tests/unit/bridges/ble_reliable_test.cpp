// The UART bridge's reliable mode over BLE: two reliable_channels, each writing serial frames
// through a nus_stream whose emulated board echoes them (RX -> TX) to the other channel, with
// notifications lost on the air. 1,000 messages arrive exactly once and in order.

#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "ble_fixture.hpp"
#include "bridges/ble/nus_stream.hpp"
#include "bridges/ble/peripheral.hpp"
#include "bridges/uart/reliable_channel.hpp"

namespace vessel::bridges::ble::testing {
namespace {

using namespace std::chrono_literals;
using uart::reliable_channel;

constexpr const char* rx2 = "0000ffe2-0000-1000-8000-00805f9b34fb";
constexpr const char* tx2 = "0000ffe3-0000-1000-8000-00805f9b34fb";

/// One side: its frames go out on `out`, and what `in` notifies is fed to it.
struct side final : uart::channel_sink {
  nus_stream* out = nullptr;
  reliable_channel* channel = nullptr;
  std::vector<std::uint32_t> delivered;
  void write_link_payload(std::span<const std::byte> payload) override {
    out->send_frame(payload, [](ble_result<void>) {});  // a lost frame is the channel's to resend
  }
  void deliver(std::span<const std::byte> m, bool reliable) override {
    if (!reliable || m.size() != 4) return;
    std::uint32_t v = 0;
    std::memcpy(&v, m.data(), 4);
    delivered.push_back(v);
  }
};

using ble_reliable = ble_env;

TEST_F(ble_reliable, thousand_messages_over_lossy_notifications_arrive_once_in_order) {
  // A second NUS-like pair on the board, echoing too: one direction per pair.
  sdbus::ObjectPath svc, r2, t2;
  mock_proxy_->callMethod("AddGattService")
      .onInterface("org.bluez.Mock")
      .withArguments(sdbus::ObjectPath{nus_dev}, std::uint16_t{0x30},
                     std::string{"0000ffe0-0000-1000-8000-00805f9b34fb"}, true)
      .storeResultsTo(svc);
  mock_proxy_->callMethod("AddGattCharacteristic")
      .onInterface("org.bluez.Mock")
      .withArguments(svc, std::uint16_t{0x31}, std::string{rx2},
                     std::vector<std::string>{"write-without-response"},
                     std::vector<std::uint8_t>{})
      .storeResultsTo(r2);
  mock_proxy_->callMethod("AddGattCharacteristic")
      .onInterface("org.bluez.Mock")
      .withArguments(svc, std::uint16_t{0x33}, std::string{tx2}, std::vector<std::string>{"notify"},
                     std::vector<std::uint8_t>{})
      .storeResultsTo(t2);
  mock("SetLoopback", r2, t2);
  mock("SetMtu", std::uint16_t{23});  // frames of 9 bytes and acks fit; larger ones fragment
  mock("DropNotifications", sdbus::ObjectPath{std::string{nus_dev} + "/service000a/char000d"}, 23u);
  mock("DropNotifications", t2, 31u);

  peripheral_config pc;
  pc.address = nus_addr;
  peripheral dev{*client_, pc};
  std::optional<ble_result<void>> ready;
  dev.start([&](ble_result<void> r) { ready = std::move(r); });
  ASSERT_TRUE(run_until([&] { return ready.has_value(); }));
  ASSERT_TRUE(*ready) << ready->error().to_string();

  nus_stream a_out{dev}, b_out{dev, nus_config{rx2, tx2}};
  uart::reliable_channel_config cc;
  cc.baud = 1'000'000;
  cc.rto_floor = 30ms;  // a D-Bus round trip through the Python emulation, with margin
  side a, b;
  reliable_channel ca{cc, a}, cb{cc, b};
  a.out = &a_out;  // A -> RX -> TX -> B
  b.out = &b_out;  // B -> RX2 -> TX2 -> A
  a.channel = &ca;
  b.channel = &cb;
  a_out.on_frame([&](std::span<const std::byte> f) {
    cb.on_link_payload(f, std::chrono::steady_clock::now());
  });
  b_out.on_frame([&](std::span<const std::byte> f) {
    ca.on_link_payload(f, std::chrono::steady_clock::now());
  });
  int opened = 0;
  a_out.open([&](auto r) {
    ASSERT_TRUE(r);
    ++opened;
  });
  b_out.open([&](auto r) {
    ASSERT_TRUE(r);
    ++opened;
  });
  ASSERT_TRUE(run_until([&] { return opened == 2; }));

  const auto now = [] { return std::chrono::steady_clock::now(); };
  ca.start(1, now());
  cb.start(2, now());
  constexpr std::uint32_t total = 1000;
  std::uint32_t next = 0;
  const bool done = run_until(
      [&] {
        while (next < total && ca.send_room() > 0) {
          std::byte m[4];
          std::memcpy(m, &next, 4);
          if (!ca.send(m, now())) break;
          ++next;
        }
        ca.poll(now());
        cb.poll(now());
        return b.delivered.size() == total;
      },
      120s);
  ASSERT_TRUE(done) << "delivered " << b.delivered.size() << " of " << total;
  for (std::uint32_t i = 0; i < total; ++i) ASSERT_EQ(b.delivered[i], i);
  EXPECT_GT(ca.stats().retransmitted_frames, 0u) << "drops were injected: something must be resent";
  EXPECT_EQ(cb.stats().delivered_reliable, total);
}

}  // namespace
}  // namespace vessel::bridges::ble::testing
