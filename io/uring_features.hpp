#pragma once
// What the running kernel's io_uring offers beyond the basics, probed once per ring at start.
// The production kernel decides, not the liburing headers we compiled against (DEPENDENCIES.md §2).

#include <string>

struct io_uring;

namespace vessel::io {

/// Optional io_uring paths. A reactor uses a path only if the kernel has it AND the config allows it,
/// so that tests can force every fallback on a kernel that has everything.
struct uring_features {
  bool single_issuer = false;     ///< IORING_SETUP_SINGLE_ISSUER (6.0): the kernel skips submit locking.
  bool coop_taskrun = false;      ///< IORING_SETUP_COOP_TASKRUN (5.19): no IPI interrupts the reactor.
  bool defer_taskrun = false;     ///< IORING_SETUP_DEFER_TASKRUN (6.1): completion work runs only when
                                  ///< the reactor thread asks for events; needs single_issuer.
  bool ext_arg = false;           ///< IORING_FEAT_EXT_ARG (5.11): a wait takes a timeout without an SQE.
  bool cancel_any = false;        ///< IORING_ASYNC_CANCEL_ANY (5.19): one SQE cancels everything at stop.
  bool multishot_accept = false;  ///< one ACCEPT SQE yields a CQE per connection (5.19).
  bool buffer_ring = false;       ///< provided-buffer rings, io_uring_register_buf_ring (5.19).
  bool multishot_recv = false;    ///< one RECV SQE yields a CQE per chunk (6.0); needs buffer_ring.
  bool send_zc = false;           ///< IORING_OP_SEND_ZC (6.0): large sends without a copy.
  bool sendmsg_zc = false;        ///< IORING_OP_SENDMSG_ZC (6.1): the same for iovec sends.
  bool registered_buffers = false;///< READ_FIXED/WRITE_FIXED after io_uring_register_buffers.
  bool registered_files = false;  ///< fixed file tables (io_uring_register_files).

  /// Every feature set: the default "allowed" mask of a reactor.
  static uring_features all() noexcept;
  /// No feature set: allowing this forces every fallback path.
  static uring_features none() noexcept { return {}; }

  /// The features set in both.
  friend uring_features operator&(const uring_features& a, const uring_features& b) noexcept;
  friend bool operator==(const uring_features&, const uring_features&) = default;

  /// One line, e.g. "single_issuer=1 coop_taskrun=1 defer_taskrun=1 ... registered_files=1".
  std::string to_string() const;
};

/// Probes `ring` (io_uring_get_probe_ring) and `ring`'s setup flags and kernel feature bits.
/// Kernel features that no opcode reveals are inferred from an opcode of the same release; each
/// inference is named in the source.
uring_features probe_features(io_uring& ring);

}  // namespace vessel::io
