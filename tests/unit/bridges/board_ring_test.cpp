// The board's SPSC byte ring (bridges/uart/board/vsl_ring.h): capacity rules, full/empty, wrap,
// chunked push/pop, and one producer thread against one consumer (the ISR / main loop split).
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "bridges/uart/board/vsl_ring.h"

namespace {

TEST(board_ring, init_accepts_only_power_of_two_capacities) {
  std::uint8_t storage[64];
  vsl_ring r;
  EXPECT_FALSE(vsl_ring_init(&r, storage, 0));
  EXPECT_FALSE(vsl_ring_init(&r, storage, 1));
  EXPECT_FALSE(vsl_ring_init(&r, storage, 48));
  EXPECT_FALSE(vsl_ring_init(&r, nullptr, 64));
  ASSERT_TRUE(vsl_ring_init(&r, storage, 64));
  EXPECT_EQ(vsl_ring_capacity(&r), 64u);
  EXPECT_EQ(vsl_ring_count(&r), 0u);
  EXPECT_EQ(vsl_ring_free(&r), 64u);
}

TEST(board_ring, full_ring_refuses_bytes_and_counts_overruns_then_empties_in_order) {
  std::uint8_t storage[8];
  vsl_ring r;
  ASSERT_TRUE(vsl_ring_init(&r, storage, 8));
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(vsl_rx_push(&r, static_cast<std::uint8_t>(i)));
  EXPECT_FALSE(vsl_rx_push(&r, 99));
  EXPECT_EQ(r.overruns, 1u);
  EXPECT_EQ(vsl_ring_count(&r), 8u);
  EXPECT_EQ(vsl_ring_free(&r), 0u);
  for (int i = 0; i < 8; ++i) {
    std::uint8_t b = 0;
    ASSERT_TRUE(vsl_ring_pop(&r, &b));
    EXPECT_EQ(b, i);
  }
  std::uint8_t b = 0;
  EXPECT_FALSE(vsl_ring_pop(&r, &b));
  EXPECT_EQ(vsl_ring_count(&r), 0u);
}

TEST(board_ring, bytes_survive_the_wrap_of_storage_and_of_the_32_bit_indices) {
  std::uint8_t storage[16];
  vsl_ring r;
  ASSERT_TRUE(vsl_ring_init(&r, storage, 16));
  r.head = r.tail = 0xFFFFFFF0u;  // the free-running indices wrap during this test
  std::uint8_t next_in = 0, next_out = 0;
  for (int round = 0; round < 40; ++round) {
    for (int i = 0; i < 11; ++i) ASSERT_TRUE(vsl_ring_push(&r, next_in++));
    for (int i = 0; i < 11; ++i) {
      std::uint8_t b = 0;
      ASSERT_TRUE(vsl_ring_pop(&r, &b));
      ASSERT_EQ(b, next_out++);
    }
  }
  EXPECT_LT(r.head, 0x1000u);  // wrapped
  EXPECT_EQ(r.overruns, 0u);
}

TEST(board_ring, chunk_push_takes_what_fits_and_chunk_pop_returns_it_across_the_wrap) {
  std::uint8_t storage[16];
  vsl_ring r;
  ASSERT_TRUE(vsl_ring_init(&r, storage, 16));
  std::vector<std::uint8_t> in(20);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>(i + 1);
  EXPECT_EQ(vsl_rx_push_chunk(&r, in.data(), 10), 10u);
  std::uint8_t out[32];
  EXPECT_EQ(vsl_ring_pop_many(&r, out, 7), 7u);  // tail at 7: the next chunk wraps
  EXPECT_EQ(vsl_rx_push_chunk(&r, in.data() + 10, 10), 10u);
  EXPECT_EQ(vsl_rx_push_chunk(&r, in.data(), 20), 3u);  // room for 3 only
  EXPECT_EQ(r.overruns, 17u);
  EXPECT_EQ(vsl_ring_pop_many(&r, out, sizeof out), 16u);
  for (int i = 0; i < 13; ++i) EXPECT_EQ(out[i], i + 8);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[13 + i], i + 1);
}

TEST(board_ring, one_producer_thread_and_one_consumer_pass_every_byte_in_order) {
  // The producer stands for the UART ISR (single bytes and DMA chunks), the consumer for the main
  // loop. A full ring makes the producer retry (a real ISR would count an overrun instead), so
  // every one of the 400 kB must arrive, in order; TSan checks the index publication.
  constexpr std::uint32_t total = 400'000;
  std::uint8_t storage[256];
  vsl_ring r;
  ASSERT_TRUE(vsl_ring_init(&r, storage, 256));
  std::thread producer([&] {
    std::uint32_t sent = 0;
    std::uint8_t chunk[37];
    while (sent < total) {
      // On 2 shared cores a side that spins on a full (or empty) ring starves the other: yield.
      if (sent % 3 == 0) {
        if (vsl_ring_push(&r, static_cast<std::uint8_t>(sent * 7u))) {
          ++sent;
        } else {
          std::this_thread::yield();
        }
        continue;
      }
      const std::uint32_t n = std::min<std::uint32_t>(sizeof chunk, total - sent);
      for (std::uint32_t i = 0; i < n; ++i) chunk[i] = static_cast<std::uint8_t>((sent + i) * 7u);
      const auto pushed = static_cast<std::uint32_t>(vsl_ring_push_many(&r, chunk, n));
      if (pushed == 0) std::this_thread::yield();
      sent += pushed;
    }
  });
  std::uint32_t received = 0, mismatches = 0;
  std::uint8_t out[64];
  while (received < total) {
    const std::size_t n = received % 2 == 0 ? vsl_ring_pop_many(&r, out, sizeof out) : vsl_ring_pop(&r, out) ? 1u : 0u;
    for (std::size_t i = 0; i < n; ++i) {
      if (out[i] != static_cast<std::uint8_t>((received + i) * 7u)) ++mismatches;
    }
    received += static_cast<std::uint32_t>(n);
    if (n == 0) std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(received, total);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(vsl_ring_count(&r), 0u);
}

}  // namespace
