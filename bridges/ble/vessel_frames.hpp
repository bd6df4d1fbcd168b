#pragma once
// Vessel frames over a NUS byte stream: the wire format of every other vessel link
// (wire/frame_codec: `u32 header_len | Cap'n Proto header | payload`) with DeviceMessage headers,
// so that a BLE board speaks the same frames as a rank. Payloads carry a CRC32C: a BLE link is
// checked per packet, but a notification lost on the air (or the partial frame a link loss leaves)
// shows up as a stream that no longer parses; then the decoder starts over and the error is
// counted. reset() does the same on purpose, at every outage.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "bridges/ble/nus_stream.hpp"
#include "wire/frame_codec.hpp"
#include "wire/frame_header.hpp"
#include "wire/stream_decoder.hpp"

namespace vessel::bridges::ble {

/// Bounds of the frames a board sends (a board has little RAM: 4 KiB payloads by default).
inline wire::decoder_limits ble_frame_limits() {
  wire::decoder_limits l;
  l.max_header_bytes = 512;
  l.max_payload_bytes = 4096;
  l.max_fragments = 1;
  return l;
}

struct vessel_frame_counters {
  std::uint64_t frames_in = 0;
  std::uint64_t frames_out = 0;
  std::uint64_t errors = 0;  ///< undecodable input, a bad CRC, a frame that is no DeviceMessage
};

class vessel_frame_stream {
 public:
  using frame_fn =
      std::function<void(const wire::device_fields&, std::span<const std::byte> payload)>;

  /// Takes over `nus`'s on_bytes.
  explicit vessel_frame_stream(nus_stream& nus, wire::decoder_limits limits = ble_frame_limits());

  void on_frame(frame_fn fn) { on_frame_ = std::move(fn); }
  /// Sends one frame: `fields` as its DeviceMessage header, `payload` after it (copied out).
  void send(const wire::device_fields& fields, std::span<const std::byte> payload,
            peripheral::done_fn done);
  /// Drops a partial frame (the link went down mid-frame).
  void reset();
  /// Feeds bytes from the board (what nus_stream's on_bytes delivers).
  void feed(std::span<const std::byte> bytes);

  const vessel_frame_counters& counters() const noexcept { return counters_; }

 private:
  nus_stream& nus_;
  wire::decoder_limits limits_;
  std::unique_ptr<wire::stream_decoder> decoder_;
  wire::frame_encoder encoder_;
  std::vector<std::byte> out_;  // one encoded frame (reused)
  frame_fn on_frame_;
  vessel_frame_counters counters_;
};

}  // namespace vessel::bridges::ble
