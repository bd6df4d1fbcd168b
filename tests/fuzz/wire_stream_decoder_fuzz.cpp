// libFuzzer target for wire::stream_decoder: the input is the byte stream, fed in chunks whose
// sizes come from the input itself, with small limits so every limit is within the fuzzer's reach.
// Every frame decoded is re-encoded and must decode to the same header (decode/encode agree).

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <span>
#include <vector>

#include "wire/frame_codec.hpp"
#include "wire/stream_decoder.hpp"

namespace {

using namespace vessel::wire;

decoder_limits fuzz_limits() {
  decoder_limits limits;
  limits.max_header_bytes = 512;
  limits.max_payload_bytes = 4096;
  limits.max_fragments = 16;
  limits.max_segments = 4;
  return limits;
}

void check_round_trip(const frame_view& frame) {
  static frame_encoder encoder;
  static stream_decoder decoder(fuzz_limits());
  auto iov = encoder.encode(frame.header, frame.payload);
  if (!iov) std::abort();  // whatever decodes must encode
  std::vector<std::byte> bytes;
  if (!encoder.encode_to(frame.header, frame.payload, bytes)) std::abort();
  if (decoder.feed(bytes) != bytes.size()) std::abort();
  auto again = decoder.next();
  if (!again || !again.value() || !(again.value()->header == frame.header)) std::abort();
  if (again.value()->payload.size() != frame.payload.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> input{reinterpret_cast<const std::byte*>(data), size};
  stream_decoder decoder(fuzz_limits());
  std::size_t split_cursor = 0;
  while (true) {
    for (;;) {
      auto frame = decoder.next();
      if (!frame) return 0;  // a typed error: the stream is bad, which is a fine outcome
      if (!frame.value()) break;
      check_round_trip(*frame.value());
    }
    if (input.empty()) return 0;
    // Chunk sizes 1..64 drawn from the input, so splits vary with what the fuzzer mutates.
    const std::size_t chunk = 1 + std::size_t{data[split_cursor++ % size]} % 64;
    input = input.subspan(decoder.feed(input.first(std::min(chunk, input.size()))));
  }
}
