#pragma once
// Whether a single-copy read of a same-host peer's memory (cross_memory.hpp) pays on this machine.
// A pulled transfer swaps two user-space copies (the sender's into the shm ring, the receiver's
// out of it, pipelined fragment by fragment on two cores at once) for one kernel copy through
// pinned pages. That wins only where the kernel copies about as fast as user space. Under some
// hypervisors it does not: on the 2-vCPU AMD EPYC PVM guests process_vm_readv moved 1 MiB in
// 2.0-3.5x memcpy's time, and pulled collectives ran at half the speed of the ring
// (docs/collective_algorithms.md, "Chunks offered only where a single copy pays"). So the
// collectives measure once per process instead of guessing from the CPU model.

#include <chrono>
#include <cstddef>
#include <system_error>

namespace vessel::io {

/// How long one copy of `single_copy_probe_bytes` took each way; the fastest of a few runs.
struct single_copy_rate {
  std::chrono::nanoseconds kernel_copy{0};  ///< pull_from_process from this process itself
  std::chrono::nanoseconds user_copy{0};    ///< memcpy
  std::error_code error;                    ///< set when the kernel refused the read (seccomp)

  /// The pull's one copy must not take more than 1.5 user copies: below that it saves a core's
  /// work, above it the ring's two overlapped copies finish first.
  bool pays() const noexcept {
    return !error && kernel_copy.count() > 0 && kernel_copy * 2 <= user_copy * 3;
  }
};

/// Larger than the L2 of the machines measured, as a transfer worth pulling (256 KiB and up) is
/// not in the cache it is copied into.
inline constexpr std::size_t single_copy_probe_bytes = std::size_t{1} << 20;

/// Measures now: about 1 ms, 2 MiB touched and freed.
single_copy_rate measure_single_copy() noexcept;

/// measure_single_copy() of the first call, kept for the process.
const single_copy_rate& single_copy_rate_here() noexcept;

}  // namespace vessel::io
