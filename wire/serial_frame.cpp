#include "wire/serial_frame.hpp"

#include <cstdint>
#include <cstring>

#include "wire/crc8.hpp"
#include "wire/errc.hpp"

namespace vessel::wire {

result<std::size_t> encode_serial_frame(std::span<const std::byte> payload,
                                        std::span<std::byte> out) noexcept {
  if (payload.size() > serial_max_payload) return make_error_code(errc::serial_payload_too_large);
  const std::size_t size = serial_frame_size(payload.size());
  if (out.size() < size) return make_error_code(errc::buffer_too_small);

  const auto len = static_cast<std::byte>(payload.size());
  // CRC before any write: `payload` may alias `out` (a caller framing in place).
  const std::uint8_t crc = crc8_update(crc8_update(crc8_init, len), payload);
  if (!payload.empty()) std::memmove(out.data() + 2, payload.data(), payload.size());
  out[0] = serial_start_byte;
  out[1] = len;
  out[2 + payload.size()] = static_cast<std::byte>(crc);
  return size;
}

}  // namespace vessel::wire
