#pragma once
// Happens-before edges that ThreadSanitizer cannot see for itself. Debian's libcaf_core is not
// built with TSan, so a buffer filled on one thread and read on another after a trip through a
// CAF mailbox looks like a race. Marking the fill as a release and the reader's first touch as
// an acquire (on the buffer's address) tells TSan about the mailbox's ordering, and a real race
// on the same bytes (a write after the hand-off) is still reported. No-ops without TSan.

#if defined(__SANITIZE_THREAD__)
#define VESSEL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define VESSEL_TSAN 1
#endif
#endif

#if defined(VESSEL_TSAN)
extern "C" void __tsan_acquire(void* addr);  // NOLINT: names fixed by the TSan runtime
extern "C" void __tsan_release(void* addr);  // NOLINT
#endif

namespace vessel::io {

/// The bytes at `addr` are complete: a thread that calls tsan_acquire(addr) later sees them.
inline void tsan_release(const void* addr) noexcept {
#if defined(VESSEL_TSAN)
  if (addr != nullptr) __tsan_release(const_cast<void*>(addr));
#else
  (void)addr;
#endif
}

/// Orders this thread after the last tsan_release(addr).
inline void tsan_acquire(const void* addr) noexcept {
#if defined(VESSEL_TSAN)
  if (addr != nullptr) __tsan_acquire(const_cast<void*>(addr));
#else
  (void)addr;
#endif
}

}  // namespace vessel::io
