#pragma once
// Reading a same-host peer's memory in one copy (cross-memory attach: process_vm_readv), as Open
// MPI's vader does for large messages, and writing into it (process_vm_writev). The peer offers
// an address range and names itself by pid and by this process's token: 16 random bytes at a
// fixed address, read before the bytes are touched, so that a pid reused by another process, or
// one seen from another pid namespace, is caught instead of read from or written to.

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

namespace vessel::io {

/// 16 random bytes that name this process to a peer reading its memory.
struct process_token {
  std::array<std::uint64_t, 2> words{};
  friend bool operator==(const process_token&, const process_token&) = default;
};

/// This process's token (drawn once, at first use; a forked child draws its own) and where it
/// lies: what a peer passes to pull_from_process.
struct process_token_offer {
  pid_t pid = 0;
  std::uint64_t token_address = 0;
  process_token token;
};
process_token_offer this_process_token() noexcept;

/// Copies `into.size()` bytes from `remote_address` in process `from.pid` into `into`, in one
/// system call that first reads `from`'s token. Errors: not_that_process (the token read there
/// differs), std::errc::operation_not_permitted (no ptrace right over the process: another user,
/// Yama, a seccomp filter), std::errc::no_such_process (it is gone), std::errc::bad_address (the
/// range is not mapped there), std::errc::function_not_supported (no process_vm_readv). A failed
/// pull may have written part of `into`.
std::error_code pull_from_process(const process_token_offer& from, std::uint64_t remote_address,
                                  std::span<std::byte> into) noexcept;

/// Copies `from` to `remote_address` in process `to.pid`, after a read of `to`'s token. The
/// read and the write are two system calls: the owner of the range must be waiting for this
/// write (as a receive that offered its buffer is), so that its pid cannot pass to another
/// process in between. Errors as pull_from_process's; a failed push may have written part of the
/// range.
std::error_code push_to_process(const process_token_offer& to, std::uint64_t remote_address,
                                std::span<const std::byte> from) noexcept;

}  // namespace vessel::io
