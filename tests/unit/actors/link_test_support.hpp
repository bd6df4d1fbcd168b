#pragma once
// Shared helpers of the link state-machine tests: a small buffer pool and frame builders.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include <gtest/gtest.h>

#include "io/buffer_pool.hpp"
#include "wire/frame_header.hpp"

namespace vessel::actors::test {

/// A pool of 64 KiB blocks, not pre-faulted (tests touch little of it).
inline io::buffer_pool_config small_pool_config(std::uint32_t blocks = 256) {
  io::buffer_pool_config c;
  c.classes = {{65536, blocks}};
  c.populate = false;
  return c;
}

/// A data frame header (seq and payload_len are the sender's to set).
inline wire::frame_header data_header(std::uint64_t tag = 0) {
  wire::frame_header h;
  wire::data_fields d;
  d.tag = tag;
  h.body = d;
  return h;
}

/// A payload of `len` bytes from `pool`, its first 8 bytes holding `stamp` (when it fits).
inline io::buffer_slice payload(io::buffer_pool& pool, std::size_t len, std::uint64_t stamp = 0) {
  io::buffer b = pool.try_acquire(len == 0 ? 1 : len);
  EXPECT_TRUE(b) << "test pool exhausted";
  if (len >= sizeof stamp) std::memcpy(b.data(), &stamp, sizeof stamp);
  return std::move(b).slice(0, len);
}

/// The header a receiver sees for a transmitted frame.
inline wire::frame_header seq_header(std::uint64_t seq, std::uint32_t len) {
  wire::frame_header h = data_header();
  h.seq = seq;
  h.payload_len = len;
  return h;
}

}  // namespace vessel::actors::test
