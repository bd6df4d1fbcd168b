#pragma once
// Helpers shared by the reactor tests: driving a reactor until a condition holds, counting threads.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "io/io_op.hpp"
#include "io/reactor.hpp"

namespace vessel::io::testing {

using fn_op = callback_op<std::function<void(int, std::uint32_t)>>;

/// Drives a driven-mode reactor until `done()` or `limit`; true if `done()` became true.
template <class Pred>
bool run_until(reactor& r, Pred done, std::chrono::milliseconds limit = std::chrono::seconds{10}) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    r.run_once(std::chrono::milliseconds{10});
  }
  return true;
}

/// Threads of this process right now, io_uring's own workers not counted. The first call starts
/// and joins a thread first, so that helper threads a sanitizer runtime starts lazily (TSan's, on
/// the first pthread_create) already exist and are not mistaken for a thread the reactor left
/// behind. The kernel's io-wq workers ("iou-wrk-N", listed as threads of the process) exit on
/// their own some time after their ring is gone: counting them made a stopped reactor look as if
/// it had left a thread behind (reactor_stop, once in ~200 runs under load).
inline std::size_t thread_count() {
  static const bool warmed = [] {
    std::thread{[] {}}.join();
    return true;
  }();
  (void)warmed;
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm{e.path() / "comm"};
    if (!comm) continue;  // exited since the listing
    std::string name;
    std::getline(comm, name);
    if (name.rfind("iou-", 0) != 0) ++n;  // iou-wrk-N, iou-sqp-N: the kernel's, not ours
  }
  return n;
}

/// Waits (not driving any loop) until `done()`, at most 10 s; true if it held. Between looks it
/// yields, or sleeps `pause` when one is given (when the loop's owner needs the core meanwhile).
template <class Pred>
bool eventually(Pred done, std::chrono::microseconds pause = std::chrono::microseconds::zero()) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (pause > std::chrono::microseconds::zero()) {
      std::this_thread::sleep_for(pause);
    } else {
      std::this_thread::yield();
    }
  }
  return true;
}

/// A reactor whose loop callers may borrow (caller-driven progress).
inline reactor_config lendable(
    std::chrono::microseconds linger = std::chrono::microseconds{1000}) {
  reactor_config c;
  c.lendable = true;
  c.lend_linger = linger;
  return c;
}

/// A driven-mode config, with every optional path or none.
inline reactor_config driven(bool better_paths) {
  reactor_config c;
  c.own_thread = false;
  c.allowed = better_paths ? uring_features::all() : uring_features::none();
  return c;
}

/// An item that posts itself again each time it runs, as a resident actor's next hop or a
/// transport's continuation does: the reactor's turns never wait while it is queued. Post it once
/// with start(); it stops when the reactor refuses posts (after stop()).
struct reposting_item {
  reactor* r;
  int runs = 0;
  void start() { r->post(work_item{&reposting_item::run, this}); }
  static void run(void* self) noexcept {
    auto* item = static_cast<reposting_item*>(self);
    ++item->runs;
    item->start();
  }
};

}  // namespace vessel::io::testing
