// The UART bridge's reliable mode over BLE against the board library itself: the emulated NUS board
// runs bridges/uart/board (tests/ble/board_helper.c behind tests/ble/bluez_gatt.py) and echoes each
// reliable message back reliably. 1,000 messages go out through a host reliable_channel over a
// nus_stream with notifications and writes lost on the way, at a 23-byte ATT MTU (every frame is
// cut in two): every echo comes back exactly once and in order.

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ble_fixture.hpp"
#include "bridges/ble/nus_stream.hpp"
#include "bridges/ble/peripheral.hpp"
#include "bridges/uart/reliable_channel.hpp"

#ifndef VESSEL_BLE_BOARD_BIN
#error "VESSEL_BLE_BOARD_BIN must name the board helper (tests/ble/board_helper.c)"
#endif

namespace vessel::bridges::ble::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t message_bytes = 16;  // 21-byte frames: two notifications at MTU 23

struct host_side final : uart::channel_sink {
  nus_stream* out = nullptr;
  std::vector<std::uint32_t> echoed;
  std::size_t malformed = 0;
  void write_link_payload(std::span<const std::byte> payload) override {
    out->send_frame(payload, [](ble_result<void>) {});  // a lost frame is the channel's to resend
  }
  void deliver(std::span<const std::byte> m, bool reliable) override {
    if (!reliable || m.size() != message_bytes) {
      ++malformed;
      return;
    }
    std::uint32_t v = 0;
    std::memcpy(&v, m.data(), 4);
    for (std::size_t i = 4; i < message_bytes; ++i)
      if (m[i] != static_cast<std::byte>(v + i)) ++malformed;
    echoed.push_back(v);
  }
};

class ble_board : public ble_env {
 protected:
  std::string mock_parameters() const override {
    return std::string{R"({"adapter":"hci0","resolve_delay_ms":30,"nus":")"} + nus_addr +
           R"(","board":")" + VESSEL_BLE_BOARD_BIN + R"("})";
  }
};

TEST_F(ble_board, thousand_messages_through_the_board_library_with_drops_arrive_once_in_order) {
  const std::string rx = std::string{nus_dev} + "/service000a/char000b";
  const std::string tx = std::string{nus_dev} + "/service000a/char000d";
  mock("SetMtu", std::uint16_t{23});
  mock("DropNotifications", sdbus::ObjectPath{tx}, 29u);
  mock("DropWrites", sdbus::ObjectPath{rx}, 37u);

  peripheral_config pc;
  pc.address = nus_addr;
  peripheral dev{*client_, pc};
  std::optional<ble_result<void>> ready;
  dev.start([&](ble_result<void> r) { ready = std::move(r); });
  ASSERT_TRUE(run_until([&] { return ready.has_value(); }));
  ASSERT_TRUE(*ready) << ready->error().to_string();
  ASSERT_EQ(dev.payload_size(), 20u);

  nus_stream stream{dev};
  uart::reliable_channel_config cc;
  cc.baud = 1'000'000;  // the board helper's
  cc.rto_floor = 40ms;  // a D-Bus round trip through the Python emulation, with margin
  host_side host;
  host.out = &stream;
  uart::reliable_channel channel{cc, host};
  stream.on_frame([&](std::span<const std::byte> f) {
    channel.on_link_payload(f, std::chrono::steady_clock::now());
  });
  std::optional<ble_result<void>> opened;
  stream.open([&](ble_result<void> r) { opened = std::move(r); });
  ASSERT_TRUE(run_until([&] { return opened.has_value(); }));
  ASSERT_TRUE(*opened) << opened->error().to_string();

  const auto now = [] { return std::chrono::steady_clock::now(); };
  channel.start(7, now());
  constexpr std::uint32_t total = 1000;
  std::uint32_t next = 0;
  const bool done = run_until(
      [&] {
        while (next < total && channel.send_room() > 0) {
          std::byte m[message_bytes];
          std::memcpy(m, &next, 4);
          for (std::size_t i = 4; i < message_bytes; ++i) m[i] = static_cast<std::byte>(next + i);
          if (!channel.send(m, now())) break;
          ++next;
        }
        channel.poll(now());
        return host.echoed.size() >= total;
      },
      180s);
  ASSERT_TRUE(done) << "echoed " << host.echoed.size() << " of " << total;
  run_for(100ms);  // a duplicate would show up now
  ASSERT_EQ(host.echoed.size(), total);
  for (std::uint32_t i = 0; i < total; ++i) ASSERT_EQ(host.echoed[i], i);
  EXPECT_EQ(host.malformed, 0u);
  EXPECT_EQ(channel.stats().delivered_reliable, total);
  EXPECT_GT(channel.stats().retransmitted_frames, 0u) << "writes were dropped: some must be resent";
  // Both directions lost something on the way, and the board saw only what arrived.
  const auto writes = written(rx);
  EXPECT_GT(writes.size(), 2u * total);
  EXPECT_GT(stream.decoder().counters().crc_errors + stream.decoder().counters().truncated +
                stream.decoder().counters().resync_bytes,
            0u)
      << "notifications were dropped: some frames must have arrived cut";
}

}  // namespace
}  // namespace vessel::bridges::ble::testing
