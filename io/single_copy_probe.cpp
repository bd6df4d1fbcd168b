#include "io/single_copy_probe.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>

#include "io/cross_memory.hpp"

namespace vessel::io {
namespace {

// The first few warm the pages and the page tables. The two copies take turns, so that a burst
// of load from a neighbour (ranks start together) slows both alike, and each keeps its fastest
// of many: with 12, the second of two ranks starting together read 1.94-1.97 in 4 of 10 launches
// on the Intel guest (1.6-1.7 alone); with 32 (about 3 ms), 1.57-1.74 in all 10.
constexpr int runs = 32;

template <typename Copy>
std::chrono::nanoseconds timed(Copy&& copy) {
  const auto start = std::chrono::steady_clock::now();
  if (!copy()) return std::chrono::nanoseconds{0};
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start);
}

}  // namespace

single_copy_rate measure_single_copy() noexcept {
  constexpr std::size_t n = single_copy_probe_bytes;
  // Written once so that every page is backed: the probe times copies, not page faults.
  const std::unique_ptr<std::byte[]> from{new (std::nothrow) std::byte[n]};
  const std::unique_ptr<std::byte[]> to{new (std::nothrow) std::byte[n]};
  single_copy_rate rate;
  if (!from || !to) {
    rate.error = std::make_error_code(std::errc::not_enough_memory);
    return rate;
  }
  std::memset(from.get(), 0x5a, n);
  std::memset(to.get(), 0, n);
  const process_token_offer self = this_process_token();
  const std::span<std::byte> into{to.get(), n};
  auto pull = [&] {
    rate.error = pull_from_process(self, reinterpret_cast<std::uintptr_t>(from.get()), into);
    return !rate.error;
  };
  auto copy = [&] {
    std::memcpy(to.get(), from.get(), n);
    // Keeps the copy: `to` is not read again, and a copy nobody reads may be dropped.
    asm volatile("" : : "r"(to.get()) : "memory");
    return true;
  };
  auto kernel = std::chrono::nanoseconds::max(), user = std::chrono::nanoseconds::max();
  for (int i = 0; i < runs; ++i) {
    const auto pulled = timed(pull);
    if (rate.error) return rate;  // refused: never pays
    kernel = std::min(kernel, pulled);
    user = std::min(user, timed(copy));
  }
  rate.kernel_copy = kernel;
  rate.user_copy = user;
  return rate;
}

const single_copy_rate& single_copy_rate_here() noexcept {
  static const single_copy_rate measured = measure_single_copy();
  return measured;
}

}  // namespace vessel::io
