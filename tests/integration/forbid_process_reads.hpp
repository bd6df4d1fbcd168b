#pragma once
// Seccomp filters that fail process_vm_readv (or process_vm_writev) with EPERM, as a container's
// may: the process can no longer read its peers' memory (or write into it), and the single-copy
// paths must fall back. Install one before the runtime starts, so that every thread inherits it.

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <iterator>

namespace vessel::test {

/// Fails system call `nr` with EPERM from now on. False if the filter could not be installed
/// (errno says why).
inline bool forbid_system_call(long nr) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<__u32>(nr), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

inline bool forbid_reading_other_processes() {
  return forbid_system_call(SYS_process_vm_readv);
}

inline bool forbid_writing_into_other_processes() {
  return forbid_system_call(SYS_process_vm_writev);
}

}  // namespace vessel::test
