// Writes the seed corpus of wire_stream_decoder_fuzz: one valid frame of each kind, a stream of
// several frames, and a few broken frames (one per early rejection path).
// Usage: make_wire_corpus <dir>   (the committed seeds live in tests/fuzz/corpus/wire_stream_decoder_fuzz/)

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "wire/errc.hpp"
#include "wire/frame_codec.hpp"
#include "wire/stream_decoder.hpp"

namespace {

using namespace vessel::wire;

std::string dir;

void write(const std::string& name, const std::vector<std::byte>& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::byte> payload(std::uint32_t n) {
  std::vector<std::byte> p(n);
  for (std::uint32_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>('a' + i % 26);
  return p;
}

std::vector<std::byte> frame(frame_header h, std::uint32_t payload_len = 0) {
  frame_encoder encoder;
  h.payload_len = payload_len;
  std::vector<std::byte> out;
  if (!encoder.encode_to(h, payload(payload_len), out)) std::abort();
  return out;
}

frame_header with(auto body, std::uint64_t seq = 0) {
  frame_header h;
  h.seq = seq;
  h.body = body;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  dir = argv[1];
  nonce n{};
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::byte>(i);

  write("hello", frame(with(hello_fields{1, 4, 9, n, std::nullopt, 0})));
  auto data = with(data_fields{0, 1, 5, 77, 1, 3, 48, 16}, 12);
  data.crc32c = 0xe3069283;  // arbitrary: the stream decoder exposes the CRC, it does not check it
  write("data", frame(data, 16));
  write("ack", frame(with(ack_fields{12})));
  write("credit", frame(with(credit_fields{65536})));
  write("heartbeat", frame(with(heartbeat_fields{1000, 500})));
  write("collective", frame(with(collective_fields{1, 2, 3, 4}, 13), 8));
  write("device", frame(with(device_fields{7, 2, 99}, 14), 3));

  std::vector<std::byte> stream;
  for (std::uint64_t s = 1; s <= 4; ++s) {
    auto f = frame(with(data_fields{0, 1, s, s, 0, 1, s * 10, 0}, s), static_cast<std::uint32_t>(s * 10));
    stream.insert(stream.end(), f.begin(), f.end());
    auto a = frame(with(ack_fields{s}));
    stream.insert(stream.end(), a.begin(), a.end());
  }
  write("stream", stream);

  // Broken, each checked to fail as intended: a header_len of 1 MiB, a segment table that
  // overruns, a union tag past the last kind, a 5-byte challenge, and a frame cut short.
  auto expect = [](const std::vector<std::byte>& bytes, errc want) {
    stream_decoder decoder;
    decoder.feed(bytes);
    auto got = decoder.next();
    const bool ok = want == errc{} ? got && !got.value() : !got && got.error() == want;
    if (!ok) {
      std::fprintf(stderr, "seed does not fail as intended (want %d)\n", static_cast<int>(want));
      std::exit(1);
    }
    return bytes;
  };
  write("bad_header_len", expect({std::byte{0}, std::byte{0}, std::byte{16}, std::byte{0}},
                                 errc::header_too_large));
  auto overrun = frame(with(ack_fields{1}));
  overrun[8] = std::byte{40};  // the one segment claims 40 words
  write("bad_segment_table", expect(overrun, errc::bad_segment_table));
  // Prefix 4 + table 8 + root pointer 8, then Frame's data section; its union tag is at byte 20.
  auto unknown = frame(with(ack_fields{1}));
  unknown[4 + 8 + 8 + 20] = std::byte{9};
  write("unknown_kind", expect(unknown, errc::unknown_kind));
  // Hello's challenge pointer is segment word 8 (root, Frame 3+1, Hello data 3); its upper half
  // holds count << 3 | element size (2 = bytes): 32 bytes -> 5 bytes.
  auto short_challenge = frame(with(hello_fields{1, 4, 9, n, std::nullopt, 0}));
  short_challenge[4 + 8 + 8 * 8 + 4] = std::byte{5 << 3 | 2};
  short_challenge[4 + 8 + 8 * 8 + 5] = std::byte{0};
  write("short_challenge", expect(short_challenge, errc::bad_field));
  auto whole = frame(data, 16);
  write("truncated", expect({whole.begin(), whole.end() - 5}, errc{}));
  return 0;
}
