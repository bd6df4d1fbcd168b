#include "wire/errc.hpp"

#include <string>

namespace vessel::wire {
namespace {

class wire_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vessel.wire"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::header_too_small: return "frame header length is below the minimum";
      case errc::header_too_large: return "frame header length exceeds the limit";
      case errc::header_misaligned: return "frame header length is not a multiple of 8 bytes";
      case errc::bad_segment_table: return "frame header segment table is inconsistent";
      case errc::malformed_header: return "frame header is not a valid Cap'n Proto message";
      case errc::unsupported_version: return "frame protocol version is not supported";
      case errc::unknown_kind: return "frame kind is unknown";
      case errc::bad_field: return "frame header field is out of range";
      case errc::payload_too_large: return "frame payload length exceeds the limit";
      case errc::too_many_fragments: return "message fragment count exceeds the limit";
      case errc::fragment_out_of_range: return "fragment lies outside its message";
      case errc::fragment_mismatch: return "fragment disagrees with its message";
      case errc::message_too_large: return "message length exceeds the limit";
      case errc::crc_mismatch: return "payload CRC32C mismatch";
      case errc::buffer_too_small: return "destination buffer is too small";
      case errc::serial_payload_too_large: return "serial frame payload exceeds 253 bytes";
    }
    return "unknown vessel.wire error";
  }
};

}  // namespace

const std::error_category& wire_category() noexcept {
  static const wire_error_category category;
  return category;
}

}  // namespace vessel::wire
