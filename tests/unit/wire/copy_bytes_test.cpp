// wire::copy_bytes and its vector loop: memcpy's result at every distance and size.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "wire/copy_bytes.hpp"

namespace vessel::wire {
namespace {

std::byte pattern(std::size_t i) { return static_cast<std::byte>((i * 131 + 7) & 0xff); }

using copy_fn = void (*)(std::byte*, const std::byte*, std::size_t);

void through_copy_bytes(std::byte* dst, const std::byte* src, std::size_t n) {
  copy_bytes(dst, src, n);
}

void through_vectors(std::byte* dst, const std::byte* src, std::size_t n) {
  detail::copy_by_vectors(dst, src, n);
}

// Copies `n` bytes from `src_offset` into a buffer at `dst_offset` and checks the copy and the
// guard bytes on both sides of it.
void check_copy(std::size_t n, std::size_t src_offset, std::size_t dst_offset,
                copy_fn copy = through_copy_bytes) {
  constexpr std::size_t guard = 64;
  std::vector<std::byte> src(src_offset + n);
  for (std::size_t i = 0; i < n; ++i) src[src_offset + i] = pattern(i);
  std::vector<std::byte> dst(dst_offset + n + guard, std::byte{0xee});
  copy(dst.data() + dst_offset, src.data() + src_offset, n);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(dst[dst_offset + i], pattern(i)) << "n " << n << " byte " << i;
  }
  for (std::size_t i = 0; i < dst_offset; ++i) ASSERT_EQ(dst[i], std::byte{0xee}) << "before";
  for (std::size_t i = 0; i < guard; ++i) ASSERT_EQ(dst[dst_offset + n + i], std::byte{0xee});
}

TEST(copy_bytes, copies_exactly_n_bytes_at_every_distance_and_size) {
  // Sizes around the vector loop's threshold and its 128-byte stride; offsets that put the
  // destination 0..80 bytes past the source (mod 4 KiB), the slow window of rep movsb among them.
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{127}, std::size_t{2047},
                              std::size_t{2048}, std::size_t{2049}, std::size_t{4096 + 77},
                              std::size_t{(1 << 18) + 3}}) {
    for (std::size_t dst_offset = 0; dst_offset <= 80; dst_offset += (n > 5000 ? 7 : 1)) {
      check_copy(n, 0, dst_offset);
      check_copy(n, 8, dst_offset);
    }
  }
}

TEST(copy_bytes, the_vector_loop_copies_exactly_n_bytes_at_every_distance_and_size) {
  // Tested whatever this CPU is: copy_bytes uses it only where rep movsb is slow (AMD), and only
  // for blocks (never 0 bytes).
  for (const std::size_t n : {std::size_t{1}, std::size_t{127}, std::size_t{128},
                              std::size_t{2049}, std::size_t{4096 + 77}, std::size_t{(1 << 18) + 3}}) {
    for (std::size_t dst_offset = 0; dst_offset <= 80; dst_offset += (n > 5000 ? 7 : 1)) {
      check_copy(n, 0, dst_offset, through_vectors);
      check_copy(n, 8, dst_offset, through_vectors);
    }
  }
}

TEST(copy_bytes, a_large_block_eight_bytes_past_its_source_modulo_a_page_arrives_intact) {
  // The case the vector loop exists for, at a size where glibc would use rep movsb.
  std::vector<std::byte> src(1 << 16), dst(src.size() + 4096);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = pattern(i);
  const auto base = reinterpret_cast<std::uintptr_t>(src.data());
  // A destination 8 bytes past the source modulo 4 KiB: the slow case of rep movsb.
  const std::size_t shift = (base + 8 - reinterpret_cast<std::uintptr_t>(dst.data())) % 4096;
  copy_bytes(dst.data() + shift, src.data(), src.size());
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(dst.data() + shift) % 4096, (base + 8) % 4096);
  for (std::size_t i = 0; i < src.size(); ++i) ASSERT_EQ(dst[shift + i], pattern(i));
}

}  // namespace
}  // namespace vessel::wire
