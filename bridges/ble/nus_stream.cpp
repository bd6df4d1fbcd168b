#include "bridges/ble/nus_stream.hpp"

#include <algorithm>
#include <array>
#include <memory>

#include "wire/serial_frame.hpp"

namespace vessel::bridges::ble {

nus_stream::nus_stream(peripheral& device, nus_config config)
    : device_{device},
      config_{std::move(config)},
      decoder_{std::chrono::nanoseconds{config_.frame_read_timeout}} {}

void nus_stream::open(peripheral::done_fn done) {
  device_.subscribe(
      config_.tx_uuid, [this](std::span<const std::uint8_t> v) { on_notification(v); },
      std::move(done));
}

void nus_stream::on_notification(std::span<const std::uint8_t> v) {
  const auto bytes = std::as_bytes(v);
  counters_.bytes_in += bytes.size();
  if (on_bytes_) on_bytes_(bytes);
  if (!on_frame_) return;
  auto rest = bytes;
  while (!rest.empty()) {
    const auto taken = decoder_.feed(rest);
    rest = rest.subspan(taken);
    while (const auto frame = decoder_.next()) {
      ++counters_.frames_in;
      on_frame_(*frame);
    }
    if (taken == 0) break;  // cannot happen after draining next(); guards a stuck loop
  }
}

void nus_stream::send(std::span<const std::byte> bytes, peripheral::done_fn done) {
  const std::size_t chunk = std::max<std::size_t>(device_.payload_size(), 1);
  const std::size_t chunks = std::max<std::size_t>((bytes.size() + chunk - 1) / chunk, 1);
  // One completion for the whole send: the first error, else success after the last chunk.
  struct tally {
    std::size_t left;
    peripheral::done_fn done;
  };
  auto t = std::make_shared<tally>(tally{chunks, std::move(done)});
  for (std::size_t i = 0; i < chunks; ++i) {
    const auto part =
        bytes.subspan(std::min(i * chunk, bytes.size()),
                      std::min(chunk, bytes.size() - std::min(i * chunk, bytes.size())));
    const auto* p = reinterpret_cast<const std::uint8_t*>(part.data());
    ++counters_.chunks_out;
    counters_.bytes_out += part.size();
    device_.write(config_.rx_uuid, std::vector<std::uint8_t>(p, p + part.size()),
                  config_.write_with_response, [t](ble_result<void> r) {
                    if (!t->done) return;
                    if (!r) return std::exchange(t->done, nullptr)(std::move(r));
                    if (--t->left == 0) std::exchange(t->done, nullptr)(outcome::success());
                  });
  }
}

void nus_stream::send_frame(std::span<const std::byte> payload, peripheral::done_fn done) {
  std::array<std::byte, wire::serial_max_frame_bytes> frame{};
  const auto n = wire::encode_serial_frame(payload, frame);
  if (!n)
    return done(ble_error{n.error(), device_.config().address, config_.rx_uuid, "serial frame"});
  send(std::span<const std::byte>{frame.data(), n.value()}, std::move(done));
}

}  // namespace vessel::bridges::ble
