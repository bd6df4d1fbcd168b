#pragma once
// A byte stream over a Nordic UART Service pair (RX: host writes, TX: board notifies), cut into
// writes of the link's usable payload size (ATT MTU - 3, re-read on every reconnect), carrying the
// serial frame format (wire/serial_frame, wire/serial_decoder), so that the UART bridge's framing
// and reliable mode run over BLE unchanged. Writes are without response by default: ordered on the
// link, and the reliable mode above repairs a chunk lost with the link (a chunk in flight at a link
// loss is resent once by the peripheral, so the stream is at-least-once per chunk).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "bridges/ble/peripheral.hpp"
#include "wire/serial_decoder.hpp"

namespace vessel::bridges::ble {

inline constexpr const char* nus_service_uuid = "6e400001-b5a3-f393-e0a9-e50e24dcca9e";
inline constexpr const char* nus_rx_uuid =
    "6e400002-b5a3-f393-e0a9-e50e24dcca9e";  ///< host -> board
inline constexpr const char* nus_tx_uuid =
    "6e400003-b5a3-f393-e0a9-e50e24dcca9e";  ///< board -> host

/// Every key with its default.
struct nus_config {
  std::string rx_uuid = nus_rx_uuid;
  std::string tx_uuid = nus_tx_uuid;
  bool write_with_response =
      false;  ///< true: one ATT round trip per chunk (flow-controlled, slower)
  std::chrono::milliseconds frame_read_timeout{
      200};  ///< a partial frame silent this long is dropped
};

struct nus_counters {
  std::uint64_t chunks_out = 0;  ///< writes issued
  std::uint64_t bytes_out = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t frames_in = 0;  ///< checked frames decoded from TX
};

class nus_stream {
 public:
  using bytes_fn = std::function<void(std::span<const std::byte>)>;

  nus_stream(peripheral& device, nus_config config = {});
  nus_stream(const nus_stream&) = delete;
  nus_stream& operator=(const nus_stream&) = delete;

  /// Subscribes to TX (kept across reconnects by the peripheral).
  void open(peripheral::done_fn done);
  /// Raw bytes from the board, as notified.
  void on_bytes(bytes_fn fn) { on_bytes_ = std::move(fn); }
  /// Payloads of checked serial frames from the board.
  void on_frame(bytes_fn fn) { on_frame_ = std::move(fn); }

  /// Sends `bytes` in order, cut at payload_size(); `done` runs after the last chunk (the first
  /// error fails it).
  void send(std::span<const std::byte> bytes, peripheral::done_fn done);
  /// Sends `payload` as one serial frame (<= wire::serial_max_payload bytes).
  void send_frame(std::span<const std::byte> payload, peripheral::done_fn done);

  const nus_counters& counters() const noexcept { return counters_; }
  const wire::serial_decoder& decoder() const noexcept { return decoder_; }

 private:
  void on_notification(std::span<const std::uint8_t> v);

  peripheral& device_;
  nus_config config_;
  wire::serial_decoder decoder_;
  bytes_fn on_bytes_;
  bytes_fn on_frame_;
  nus_counters counters_;
};

}  // namespace vessel::bridges::ble
