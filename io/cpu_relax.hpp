#pragma once
// The pause a spin-wait takes between polls: it yields the core's pipeline to a hyper-thread
// sibling and saves power, without giving the CPU away as sched_yield would.

namespace vessel::io {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace vessel::io
