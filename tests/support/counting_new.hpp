#pragma once
// Replaces the global operator new with one that counts its calls, for the tests and benchmarks
// that prove a path allocates nothing. A replacement operator new applies to the whole program
// and may not be inline: include this header in exactly one translation unit of an executable of
// its own (it would perturb any other test linked beside it).

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace vessel::test {

inline std::atomic<std::uint64_t> allocation_counter{0};
inline thread_local std::uint64_t thread_allocation_counter = 0;

/// operator new calls so far in this process (any thread). Diff two readings around the path.
inline std::uint64_t allocations() noexcept {
  return allocation_counter.load(std::memory_order_relaxed);
}

/// operator new calls so far on the calling thread: a path that runs beside other threads (a
/// reactor's) is measured without counting theirs.
inline std::uint64_t allocations_on_this_thread() noexcept { return thread_allocation_counter; }

}  // namespace vessel::test

// noinline: once inlined, g++ 12 pairs the malloc with free and warns of a new/delete mismatch.
[[gnu::noinline]] void* operator new(std::size_t size) {
  vessel::test::allocation_counter.fetch_add(1, std::memory_order_relaxed);
  ++vessel::test::thread_allocation_counter;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc{};
}
[[gnu::noinline]] void operator delete(void* p) noexcept {
  std::free(p);
}
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
