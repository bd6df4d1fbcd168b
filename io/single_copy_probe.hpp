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

  /// The pull's one copy must take under the two user copies it replaces, with a margin: 1.85.
  /// The readings of both kinds of machine lie either side (docs/collective_algorithms.md, "Pulls
  /// pay on an Intel guest"): 1.55-1.77 alone, up to 1.93 beside another probe, on an Intel Xeon
  /// KVM guest, where pulled collectives ran 1.2-1.4x faster on 2 and 4 ranks; 2.0-3.8 on the AMD
  /// EPYC PVM guests, where they ran at half the speed. 1.5, the line drawn first, kept them off
  /// on Intel.
  bool pays() const noexcept {
    return !error && kernel_copy.count() > 0 && kernel_copy * 20 <= user_copy * 37;
  }

  /// Whether a transfer that both processes copy at once (each half of it through the kernel:
  /// the shm transport's lent payloads, vessel::comm's pulled sends) pays against the ring: its
  /// kernel copy at most 2.5 user copies. Halves copied at once take ~0.4 of one kernel copy of
  /// the whole (bench_io_cross_memory: 1 MiB in 19.6 µs against 51.8), and the ring costs each
  /// core one user copy where it pipelines well (the AMD EPYC guests: 1 MiB at ~20 GB/s) and
  /// 2.5 where lines cross between the cores' caches (the Intel guest: 11-12 GB/s, memcpy ~30),
  /// so 2.5 is where the halves cost what the better ring costs. On the Intel guest the probe
  /// read 1.55-1.77 one day and 1.76-2.29 another, and lending won 2.5x at both.
  bool pays_split() const noexcept {
    return !error && kernel_copy.count() > 0 && kernel_copy * 2 <= user_copy * 5;
  }
};

/// Larger than the L2 of the machines measured, as a transfer worth pulling (256 KiB and up) is
/// not in the cache it is copied into.
inline constexpr std::size_t single_copy_probe_bytes = std::size_t{1} << 20;

/// Measures now: about 3 ms, 2 MiB touched and freed.
single_copy_rate measure_single_copy() noexcept;

/// measure_single_copy() of the first call, kept for the process.
const single_copy_rate& single_copy_rate_here() noexcept;

}  // namespace vessel::io
