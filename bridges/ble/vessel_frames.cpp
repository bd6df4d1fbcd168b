#include "bridges/ble/vessel_frames.hpp"

#include <variant>

#include "wire/crc32c.hpp"

namespace vessel::bridges::ble {

vessel_frame_stream::vessel_frame_stream(nus_stream& nus, wire::decoder_limits limits)
    : nus_{nus}, limits_{limits}, decoder_{std::make_unique<wire::stream_decoder>(limits)} {
  nus_.on_bytes([this](std::span<const std::byte> b) { feed(b); });
}

void vessel_frame_stream::send(const wire::device_fields& fields,
                               std::span<const std::byte> payload, peripheral::done_fn done) {
  wire::frame_header h;
  h.payload_len = static_cast<std::uint32_t>(payload.size());
  h.crc32c = wire::crc32c(payload);
  h.body = fields;
  out_.clear();
  if (auto r = encoder_.encode_to(h, payload, out_); !r)
    return done(ble_error{r.error(), {}, {}, "vessel frame encode"});
  ++counters_.frames_out;
  nus_.send(out_, std::move(done));  // nus_stream copies each chunk out
}

void vessel_frame_stream::reset() { decoder_ = std::make_unique<wire::stream_decoder>(limits_); }

void vessel_frame_stream::feed(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const auto taken = decoder_->feed(bytes);
    bytes = bytes.subspan(taken);
    for (;;) {
      auto next = decoder_->next();
      if (!next) {  // out of sync: start over with what follows (the board resends or gives up)
        ++counters_.errors;
        reset();
        break;
      }
      if (!next.value()) break;
      const auto& f = *next.value();
      const auto* dev = std::get_if<wire::device_fields>(&f.header.body);
      if (dev == nullptr || (f.header.crc32c && *f.header.crc32c != wire::crc32c(f.payload))) {
        ++counters_.errors;
        continue;
      }
      ++counters_.frames_in;
      if (on_frame_) on_frame_(*dev, f.payload);
    }
    if (taken == 0 && !bytes.empty()) {  // full of a frame that never completes: start over
      ++counters_.errors;
      reset();
    }
  }
}

}  // namespace vessel::bridges::ble
