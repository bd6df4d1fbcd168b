// Proves that the hot path of buffer_pool never allocates. This binary replaces the global
// operator new to count calls, which would perturb every other test, hence its own executable.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>

#include "io/buffer_pool.hpp"
#include "io/reactor.hpp"
#include "io/timer_queue.hpp"
#include "tests/unit/io/reactor_test_support.hpp"

namespace {
std::atomic<std::size_t> g_news{0};
}  // namespace

namespace {
void* counted_alloc(std::size_t size, std::size_t align) noexcept {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  if (align <= alignof(std::max_align_t)) return std::malloc(size);
  return std::aligned_alloc(align, (size + align - 1) / align * align);
}
void* counted_alloc_or_throw(std::size_t size, std::size_t align) {
  if (void* p = counted_alloc(size, align)) return p;
  throw std::bad_alloc{};
}
}  // namespace

// Every replaceable form: under ASan the runtime provides the others itself, so forms left out
// would neither be counted nor pair with these deletes.
void* operator new(std::size_t n) { return counted_alloc_or_throw(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc_or_throw(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return counted_alloc_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted_alloc_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
// GCC sees free() of what operator new returned once both are inlined, and cannot know that this
// operator new is malloc: a false positive for a replacement pair.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace vessel::io {
namespace {

TEST(buffer_pool_alloc, operator_new_counter_sees_allocations) {
  const std::size_t before = g_news.load();
  // Called as functions, not new-expressions, which the compiler may elide.
  void* p = ::operator new(16);
  ::operator delete(p);
  void* q = ::operator new[](64, std::align_val_t{64});
  ::operator delete[](q, std::align_val_t{64});
  EXPECT_EQ(g_news.load() - before, 2u) << "the replacement is not in effect";
}

TEST(buffer_pool_alloc, acquire_copy_slice_and_release_never_allocate) {
  buffer_pool pool{buffer_pool_config{{{256, 4}, {4096, 2}}, true}};
  int exhaustions = 0;
  std::size_t bytes_seen = 0;
  pool.set_available_callback([&](std::size_t) { ++exhaustions; });

  const std::size_t before = g_news.load();
  for (int i = 0; i < 10'000; ++i) {
    buffer a = pool.try_acquire(200);
    buffer b = pool.try_acquire(4000);
    buffer c = pool.try_acquire(4000);
    buffer none = pool.try_acquire(4000);  // exhausted: the empty handle must not allocate either
    buffer a2 = a;
    buffer_slice s = a2.slice(8, 64);
    buffer_slice t = std::move(s).subslice(4, 4);
    std::memset(t.data(), i & 0xff, t.size());
    bytes_seen += t.size() + b.size() + c.size() + none.size();
    b.reset();  // fires the available-callback
  }
  const std::size_t allocations = g_news.load() - before;

  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(exhaustions, 10'000);
  EXPECT_EQ(bytes_seen, 10'000u * (4 + 4096 + 4096));
  pool.set_available_callback({});
}

// A timer re-armed from its own callback every period (the shm watchdog) and one cancelled and
// re-added per message (a retry timer) reuse the queue's nodes: no allocation once warm.
TEST(timer_queue_alloc, rearming_and_cancelling_timers_never_allocate_once_warm) {
  timer_queue q;
  int fired = 0;
  int cancelled = 0;
  std::function<void()> rearm;
  rearm = [&] {
    ++fired;
    q.add(timer_queue::clock::time_point{}, [&] { rearm(); });
  };
  const auto step = [&] {
    q.run_due(timer_queue::clock::now());  // runs the re-armed one, which re-arms itself
    const timer_id retry = q.add(timer_queue::clock::time_point::max(), [&] { ++fired; });
    cancelled += q.cancel(retry) ? 1 : 0;
  };
  q.add(timer_queue::clock::time_point{}, [&] { rearm(); });
  for (int i = 0; i < 1000; ++i) step();  // warm: nodes, heap and spare list reach their sizes
  const std::size_t before = g_news.load();
  for (int i = 0; i < 10'000; ++i) step();
  const std::size_t allocations = g_news.load() - before;
  EXPECT_EQ(allocations, 0u);
  EXPECT_GE(fired, 10'000);
  EXPECT_EQ(cancelled, 11'000);
}

// A resident actor's hop, or a transport's continuation, is an item that the reactor thread posts
// while running posted items; a watchdog timer far off stays pending. Once warm, turns like these
// allocate nothing: the posted items' buffers trade places rather than going with the batch.
TEST(reactor_alloc, turns_whose_items_post_again_never_allocate_once_warm) {
  reactor_config config;
  config.own_thread = false;
  reactor r{config};
  ASSERT_TRUE(r.start());
  r.add_timer(std::chrono::hours{1}, [] {});
  testing::reposting_item a{&r}, b{&r};
  a.start();
  b.start();
  for (int i = 0; i < 100; ++i) r.run_once(std::chrono::nanoseconds::zero());
  const std::size_t before = g_news.load();
  for (int i = 0; i < 10'000; ++i) r.run_once(std::chrono::nanoseconds::zero());
  const std::size_t allocations = g_news.load() - before;
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(a.runs, 10'100 * static_cast<int>(reactor::max_posted_passes));
  EXPECT_EQ(b.runs, 10'100 * static_cast<int>(reactor::max_posted_passes));
  r.stop();
}

}  // namespace
}  // namespace vessel::io
