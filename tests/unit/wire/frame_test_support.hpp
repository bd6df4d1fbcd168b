#pragma once
// Frames for the codec tests: one header of each kind, random headers with a fixed seed, and
// hand-built Cap'n Proto messages for inputs the encoder refuses to produce.

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "wire/frame.capnp.h"
#include "wire/frame_codec.hpp"
#include "wire/frame_header.hpp"

namespace vessel::wire::test {

inline nonce make_nonce(std::uint8_t first) {
  nonce n;
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::byte>(first + i);
  return n;
}

/// One header of every kind, every field away from its default.
inline std::vector<frame_header> one_header_per_kind() {
  std::vector<frame_header> out;
  auto add = [&](std::uint64_t seq, auto body) {
    frame_header h;
    h.seq = seq;
    h.body = body;
    out.push_back(h);
  };
  add(0, hello_fields{3, 8, 0x1122334455667788, make_nonce(1), make_nonce(100), 41});
  add(17, data_fields{1, 2, 0xabcdef, 99, 2, 5, 1u << 20, 3u << 16});
  add(0, ack_fields{0xfffffffffffffff0, true});
  add(0, credit_fields{1u << 30});
  add(0, heartbeat_fields{123456789, 987654321});
  add(18, collective_fields{7, 3, 4, 9});
  add(19, device_fields{42, 0xbeef, 77});
  out[1].crc32c = 0xdeadbeef;
  return out;
}

/// A random header of a random kind whose fields decode cleanly under default limits.
inline frame_header random_header(std::mt19937_64& rng, std::uint32_t payload_len) {
  auto u64 = [&] { return rng(); };
  auto u32 = [&] { return static_cast<std::uint32_t>(rng()); };
  frame_header h;
  h.seq = u64();
  h.payload_len = payload_len;
  if (rng() % 2) h.crc32c = u32();
  switch (rng() % 7) {
    case 0: {
      hello_fields f{u32(), u32(), u64(), std::nullopt, std::nullopt, u64()};
      if (rng() % 2) f.challenge = make_nonce(static_cast<std::uint8_t>(rng()));
      if (rng() % 2) f.response = make_nonce(static_cast<std::uint8_t>(rng()));
      h.body = f;
      break;
    }
    case 1: {
      data_fields f{u32(), u32(), u64(), u64(), 0, 1, 0, 0};
      f.fragment_count = 1 + u32() % 1000;
      f.fragment_index = u32() % f.fragment_count;
      f.fragment_offset = u64() >> 2;
      f.total_len = f.fragment_offset + payload_len + (u64() >> 2);
      h.body = f;
      break;
    }
    case 2: h.body = ack_fields{u64(), rng() % 2 == 1}; break;
    case 3: h.body = credit_fields{u64()}; break;
    case 4: h.body = heartbeat_fields{u64(), u64()}; break;
    case 5: h.body = collective_fields{u64(), u64(), u32(), u32()}; break;
    default: h.body = device_fields{u32(), static_cast<std::uint16_t>(rng()), u64()}; break;
  }
  return h;
}

inline std::vector<std::byte> bytes_of(std::uint32_t n, std::uint8_t salt) {
  std::vector<std::byte> out(n);
  for (std::uint32_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(i * 31 + salt);
  return out;
}

/// `u32 header_len | message | payload` for a message built by hand with Cap'n Proto.
inline std::vector<std::byte> frame_from_message(capnp::MessageBuilder& message,
                                                 std::span<const std::byte> payload = {}) {
  kj::Array<capnp::word> flat = capnp::messageToFlatArray(message);
  auto bytes = flat.asBytes();
  std::vector<std::byte> out(4);
  const auto len = static_cast<std::uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::byte>(len >> (8 * i));
  const auto* b = reinterpret_cast<const std::byte*>(bytes.begin());
  out.insert(out.end(), b, b + bytes.size());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

/// A frame whose prefix and header are given word by word (header_len = 8 * words.size()).
inline std::vector<std::byte> frame_from_words(std::uint32_t header_len,
                                               std::vector<std::uint64_t> words) {
  std::vector<std::byte> out(4 + 8 * words.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::byte>(header_len >> (8 * i));
  for (std::size_t w = 0; w < words.size(); ++w) {
    for (int i = 0; i < 8; ++i) out[4 + 8 * w + i] = static_cast<std::byte>(words[w] >> (8 * i));
  }
  return out;
}

}  // namespace vessel::wire::test
