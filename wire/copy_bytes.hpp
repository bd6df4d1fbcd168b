#pragma once
// memcpy for payload-sized copies, minus a slow case of glibc's on the CPUs we run on.
//
// glibc 2.36 (Debian 12) moves blocks of a few KiB and more with `rep movsb`. On the AMD EPYC
// vCPUs of our machines that runs at 2-3 GB/s instead of 40-48 GB/s whenever the destination lies
// 1 to 15 bytes past the source modulo 4 KiB (bench_wire_copy; every other distance is fine).
// Payload copies hit it easily: a block of our pool holds its data 8 or 16 bytes into a page, and
// glibc's large allocations start 16 bytes into one, so the allgather half of a 1 MiB allreduce
// spent 40 % of its time in a single such copy. Copies at those distances go through a vector
// loop; everything else stays memcpy. Only on AMD: on the Intel Xeon vCPUs of 2026-12 glibc
// copies 40 GB/s at those distances against the loop's 35, and a 1-16 MiB shm stream, whose
// receiver copies at such a distance, ran 2-11 % faster with glibc's copy (docs/io_performance.md,
// "Payload copies and glibc's rep movsb"). It lives in wire, the lowest module, because the
// link's reassembly copies with it too.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vessel::wire {

namespace detail {
/// Distances (destination minus source, modulo 4 KiB) of 1 up to this, excluded, are copied by
/// copy_by_vectors: 1-15 measured slow, the rest of a cache line taken as margin.
inline constexpr std::uintptr_t slow_distance_end = 64;
/// Below this glibc copies with vector moves itself.
inline constexpr std::size_t vector_copy_min = 2048;
/// Copies with unaligned 32-byte (AVX2) or 16-byte (SSE2) loads and stores.
void copy_by_vectors(std::byte* dst, const std::byte* src, std::size_t n) noexcept;
/// Whether this CPU's `rep movsb` has the slow distances (an AMD CPU; checked once).
bool rep_movsb_slow_near_source() noexcept;
}  // namespace detail

/// std::memcpy(dst, src, n) for buffers that do not overlap.
inline void copy_bytes(void* dst, const void* src, std::size_t n) noexcept {
  const std::uintptr_t distance =
      (reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src)) % 4096;
  if (n >= detail::vector_copy_min && distance != 0 && distance < detail::slow_distance_end &&
      detail::rep_movsb_slow_near_source()) {
    detail::copy_by_vectors(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
  } else if (n != 0) {
    std::memcpy(dst, src, n);
  }
}

}  // namespace vessel::wire
