// libFuzzer target for wire::stream_decoder: the input is the byte stream, fed in chunks whose
// sizes come from the input itself, with small limits so every limit is within the fuzzer's reach.
// Every frame decoded is re-encoded and must decode to the same header (decode/encode agree). A
// second decoder reads the same stream redirecting payloads still to come (redirect_payload,
// into a head and a body part of sizes drawn from the input, as a link's landing would): it must
// yield the same frames with the same bytes, and fail where the first one fails.

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

struct decoded {
  frame_header header;
  std::vector<std::byte> payload;
  bool operator==(const decoded&) const = default;
};

struct decode_outcome {
  std::vector<decoded> frames;
  bool failed = false;
};

// Decodes `input` fed in chunks drawn from it; with `redirecting`, every payload still awaited
// goes into memory of its own (a head part of a drawn size, the rest in a body part).
decode_outcome decode(std::span<const std::byte> input, const std::uint8_t* data, std::size_t size,
                      bool redirecting) {
  decode_outcome out;
  stream_decoder decoder(fuzz_limits());
  std::vector<std::vector<std::byte>> parts;  // kept until the frame is out
  std::size_t split_cursor = 0;
  while (true) {
    for (;;) {
      auto frame = decoder.next();
      if (!frame) {
        out.failed = true;  // a typed error: the stream is bad, which is a fine outcome
        return out;
      }
      if (!frame.value()) {
        const frame_header* h = decoder.awaiting_payload();
        if (redirecting && h != nullptr) {
          if (decoder.payload_arrived().size() != decoder.payload_buffered()) std::abort();
          const std::size_t head = std::size_t{data[split_cursor % size]} % (h->payload_len + 1);
          parts.clear();
          parts.emplace_back(head);
          parts.emplace_back(h->payload_len - head);
          if (!decoder.redirect_payload(parts[0], parts[1])) std::abort();
        }
        break;
      }
      const frame_view& f = *frame.value();
      if (!redirecting) check_round_trip(f);
      if (f.head.size() + f.payload.size() != f.header.payload_len) std::abort();
      decoded d{f.header, {f.head.begin(), f.head.end()}};
      d.payload.insert(d.payload.end(), f.payload.begin(), f.payload.end());
      out.frames.push_back(std::move(d));
    }
    if (input.empty()) return out;
    // Chunk sizes 1..64 drawn from the input, so splits vary with what the fuzzer mutates.
    const std::size_t chunk = 1 + std::size_t{data[split_cursor++ % size]} % 64;
    input = input.subspan(decoder.feed(input.first(std::min(chunk, input.size()))));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> input{reinterpret_cast<const std::byte*>(data), size};
  const decode_outcome plain = decode(input, data, size, false);
  const decode_outcome redirected = decode(input, data, size, true);
  if (plain.failed != redirected.failed || plain.frames != redirected.frames) std::abort();
  return 0;
}
