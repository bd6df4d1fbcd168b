#include "io/buffer_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/lockfree/spsc_queue.hpp>

namespace vessel::io {
namespace {

// Small classes keep the tests fast under the sanitizers; the logic is the same at any size.
buffer_pool_config small_config() {
  return buffer_pool_config{{{4096, 4}, {256, 8}, {65536, 2}}, true};
}

TEST(buffer_pool, acquired_buffer_is_writable_and_returns_to_the_pool_on_release) {
  buffer_pool pool{small_config()};
  buffer b = pool.try_acquire(100);
  ASSERT_TRUE(b);
  EXPECT_EQ(b.size(), 256u);
  EXPECT_EQ(b.use_count(), 1u);
  std::memset(b.data(), 0xab, b.size());
  EXPECT_EQ(b.bytes()[255], std::byte{0xab});
  EXPECT_EQ(pool.stats(0).in_use, 1u);

  b.reset();
  EXPECT_FALSE(b);
  const size_class_stats s = pool.stats(0);
  EXPECT_EQ(s.acquired, 1u);
  EXPECT_EQ(s.released, 1u);
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.high_water, 1u);
}

TEST(buffer_pool, request_gets_the_smallest_class_that_holds_it) {
  buffer_pool pool{small_config()};
  ASSERT_EQ(pool.class_count(), 3u);  // sorted: 256, 4096, 65536
  EXPECT_EQ(pool.block_size(0), 256u);
  EXPECT_EQ(pool.block_size(2), 65536u);
  EXPECT_EQ(pool.max_block_size(), 65536u);

  EXPECT_EQ(pool.try_acquire(0).size(), 256u);
  EXPECT_EQ(pool.try_acquire(256).size(), 256u);
  EXPECT_EQ(pool.try_acquire(257).size(), 4096u);
  EXPECT_EQ(pool.try_acquire(4096).size(), 4096u);
  EXPECT_EQ(pool.try_acquire(4097).size(), 65536u);
  EXPECT_EQ(pool.try_acquire(65536).region_index(), 2u);
  EXPECT_EQ(pool.class_for(70000), std::nullopt);
}

TEST(buffer_pool, request_larger_than_every_class_is_empty_and_not_counted_as_exhaustion) {
  buffer_pool pool{small_config()};
  EXPECT_FALSE(pool.try_acquire(65537));
  for (std::size_t i = 0; i < pool.class_count(); ++i) EXPECT_EQ(pool.stats(i).exhausted, 0u);
}

TEST(buffer_pool, exhausted_class_returns_empty_handle_until_release) {
  buffer_pool pool{small_config()};
  std::vector<buffer> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(pool.try_acquire(4096));
    ASSERT_TRUE(held.back()) << i;
  }
  EXPECT_FALSE(pool.try_acquire(4096));
  EXPECT_FALSE(pool.try_acquire(1000));
  // Exhaustion of one class does not spill into another.
  EXPECT_TRUE(pool.try_acquire(100));
  EXPECT_EQ(pool.stats(1).exhausted, 2u);
  EXPECT_EQ(pool.stats(1).high_water, 4u);

  std::byte* returned = held[2].data();
  held[2].reset();
  buffer again = pool.try_acquire(4096);
  ASSERT_TRUE(again);
  EXPECT_EQ(again.data(), returned);
  EXPECT_EQ(pool.stats(1).high_water, 4u);
}

TEST(buffer_pool, all_blocks_are_distinct_and_inside_their_region) {
  buffer_pool pool{small_config()};
  const auto regions = pool.regions();
  ASSERT_EQ(regions.size(), pool.class_count());
  for (std::size_t c = 0; c < pool.class_count(); ++c) {
    const size_class_stats s = pool.stats(c);
    EXPECT_EQ(regions[c].iov_len, s.block_size * s.block_count);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(regions[c].iov_base) % 4096, 0u) << "page-aligned";

    std::vector<buffer> held;
    std::vector<bool> seen(s.block_count, false);
    for (std::uint32_t i = 0; i < s.block_count; ++i) {
      buffer b = pool.try_acquire(s.block_size);
      ASSERT_TRUE(b);
      ASSERT_EQ(b.region_index(), c);
      ASSERT_EQ(b.region_offset() % s.block_size, 0u);
      const std::size_t block = b.region_offset() / s.block_size;
      ASSERT_LT(block, s.block_count);
      EXPECT_FALSE(seen[block]) << "block handed out twice";
      seen[block] = true;
      EXPECT_EQ(b.data(), static_cast<std::byte*>(regions[c].iov_base) + b.region_offset());
      held.push_back(std::move(b));
    }
    EXPECT_FALSE(pool.try_acquire(s.block_size));
  }
  EXPECT_GE(pool.memory_bytes(), 4 * 4096u + 8 * 256u + 2 * 65536u);
}

TEST(buffer_pool, slices_share_the_block_and_keep_it_alive) {
  buffer_pool pool{small_config()};
  buffer b = pool.try_acquire(4096);
  ASSERT_TRUE(b);
  std::byte* block = b.data();
  for (std::size_t i = 0; i < b.size(); ++i) b.bytes()[i] = static_cast<std::byte>(i);

  buffer_slice outer = b.slice(100, 1000);
  EXPECT_EQ(b.use_count(), 2u);
  buffer_slice inner = outer.subslice(10, 20);
  EXPECT_EQ(b.use_count(), 3u);
  EXPECT_EQ(inner.data(), block + 110);
  EXPECT_EQ(inner.size(), 20u);
  EXPECT_EQ(inner.offset(), 110u);
  EXPECT_EQ(inner.bytes()[0], static_cast<std::byte>(110));

  // Writes through one view are seen through the others: same memory, no copy.
  std::byte* first = inner.data();
  if (first == nullptr) GTEST_FAIL() << "a live slice has no data";
  *first = std::byte{0xee};
  EXPECT_EQ(b.bytes()[110], std::byte{0xee});
  EXPECT_EQ(outer.bytes()[10], std::byte{0xee});

  b.reset();
  outer.reset();
  EXPECT_EQ(pool.stats(1).in_use, 1u) << "the inner slice still holds the block";
  EXPECT_EQ(inner.bytes()[1], static_cast<std::byte>(111));
  buffer_slice moved = std::move(inner).subslice(1, 0);
  EXPECT_TRUE(moved);
  EXPECT_TRUE(moved.empty());
  EXPECT_EQ(moved.owner().use_count(), 1u);
  moved.reset();
  EXPECT_EQ(pool.stats(1).in_use, 0u);
  EXPECT_EQ(pool.stats(1).released, 1u);
}

TEST(buffer_pool, copies_and_moves_count_references_exactly) {
  buffer_pool pool{small_config()};
  buffer a = pool.try_acquire(1);
  buffer b = a;
  buffer c;
  c = b;
  EXPECT_EQ(a.use_count(), 3u);
  buffer d = std::move(c);
  EXPECT_FALSE(c);  // NOLINT(bugprone-use-after-move): a moved-from handle is empty by contract
  EXPECT_EQ(a.use_count(), 3u);
  d = a;  // self-block assignment keeps the count
  EXPECT_EQ(a.use_count(), 3u);
  a = buffer{};
  b.reset();
  EXPECT_EQ(d.use_count(), 1u);
  EXPECT_EQ(pool.stats(0).in_use, 1u);
  d = std::move(d);  // self-move leaves it owning
  EXPECT_EQ(pool.stats(0).in_use, 1u);
  d.reset();
  EXPECT_EQ(pool.stats(0).in_use, 0u);
}

TEST(buffer_pool, a_moved_from_slice_views_no_bytes) {
  buffer_pool pool{small_config()};
  buffer_slice a = pool.try_acquire(4096).slice(8, 100);
  ASSERT_TRUE(a);
  std::byte* bytes = a.data();

  buffer_slice b = std::move(a);
  // NOLINTBEGIN(bugprone-use-after-move): a moved-from slice is empty by contract
  EXPECT_FALSE(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), bytes);
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(b.offset(), 8u);

  buffer_slice c = pool.try_acquire(1).slice(0, 1);
  c = std::move(b);  // drops c's own block
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.offset(), 0u);
  // NOLINTEND(bugprone-use-after-move)
  EXPECT_EQ(c.data(), bytes);
  EXPECT_EQ(c.size(), 100u);
  EXPECT_EQ(pool.stats(0).in_use, 0u) << "the 1-byte block went back when c was assigned";

  c = std::move(c);  // self-move keeps the view
  EXPECT_EQ(c.data(), bytes);
  EXPECT_EQ(c.size(), 100u);
  c.reset();
  EXPECT_EQ(pool.stats(1).in_use, 0u);
}

TEST(buffer_pool, available_callback_fires_once_when_an_exhausted_class_gets_a_block_back) {
  buffer_pool pool{small_config()};
  std::vector<std::size_t> notices;
  pool.set_available_callback([&](std::size_t class_index) { notices.push_back(class_index); });

  buffer x = pool.try_acquire(65536);
  buffer y = pool.try_acquire(65536);
  x.reset();
  EXPECT_TRUE(notices.empty()) << "no one was waiting";
  x = pool.try_acquire(65536);
  ASSERT_TRUE(x);
  EXPECT_FALSE(pool.try_acquire(65536));

  x.reset();
  ASSERT_EQ(notices, std::vector<std::size_t>{2});
  y.reset();
  EXPECT_EQ(notices.size(), 1u) << "one notice per exhaustion, not per release";

  // The callback may take the freed block itself.
  x = pool.try_acquire(65536);
  y = pool.try_acquire(65536);
  EXPECT_FALSE(pool.try_acquire(65536));
  buffer taken;
  pool.set_available_callback(
      [&](std::size_t class_index) { taken = pool.try_acquire(pool.block_size(class_index)); });
  y.reset();
  EXPECT_TRUE(taken);
  taken.reset();
  x.reset();
  pool.set_available_callback({});
}

TEST(buffer_pool, waiter_on_another_thread_is_woken_by_the_release) {
  buffer_pool pool{buffer_pool_config{{{64, 1}}, true}};
  std::mutex mutex;
  std::condition_variable cv;
  bool available = false;
  pool.set_available_callback([&](std::size_t) {
    const std::lock_guard lock{mutex};
    available = true;
    cv.notify_one();
  });

  buffer held = pool.try_acquire(64);
  ASSERT_TRUE(held);
  std::atomic<bool> waiter_saw_empty{false};
  std::thread waiter{[&] {
    buffer mine;
    for (;;) {
      mine = pool.try_acquire(64);
      if (mine) break;
      waiter_saw_empty.store(true);
      std::unique_lock lock{mutex};
      cv.wait(lock, [&] { return available; });
      available = false;
    }
    mine.bytes()[0] = std::byte{1};
  }};
  while (!waiter_saw_empty.load()) std::this_thread::yield();
  held.reset();
  waiter.join();
  EXPECT_EQ(pool.stats(0).acquired, 2u);
  EXPECT_EQ(pool.stats(0).in_use, 0u);
  pool.set_available_callback({});
}

// Each thread stamps its block and checks the stamp after copying and slicing: two owners of
// one block at once would overwrite each other's stamp.
TEST(buffer_pool, refcounts_and_counters_stay_consistent_across_threads) {
  constexpr int threads = 4;
  constexpr int cycles = 100'000;
  buffer_pool pool{buffer_pool_config{{{256, 2 * threads}}, true}};
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < cycles; ++i) {
        buffer b = pool.try_acquire(200);
        if (!b) {
          failures.fetch_add(1);
          continue;
        }
        const std::uint64_t stamp = std::uint64_t(t) << 32 | std::uint32_t(i);
        std::memcpy(b.data(), &stamp, sizeof stamp);
        buffer copy = b;
        buffer_slice view = copy.slice(0, sizeof stamp);
        b.reset();
        std::uint64_t read = 0;
        if (const std::byte* p = view.data(); p != nullptr) std::memcpy(&read, p, sizeof read);
        if (read != stamp) failures.fetch_add(1);
      }
    });
  }
  for (auto& w : workers) w.join();

  EXPECT_EQ(failures.load(), 0);
  const size_class_stats s = pool.stats(0);
  EXPECT_EQ(s.acquired, std::uint64_t{threads} * cycles);
  EXPECT_EQ(s.released, s.acquired);
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.exhausted, 0u);
  EXPECT_GE(s.high_water, 1u);
  EXPECT_LE(s.high_water, std::uint32_t{threads});
  std::vector<buffer> all;
  for (std::uint32_t i = 0; i < s.block_count; ++i) all.push_back(pool.try_acquire(1));
  for (const buffer& b : all) EXPECT_TRUE(b) << "a block was lost from the free list";
}

// The data path's pattern: the reactor fills a block and an actor thread drops it.
TEST(buffer_pool, buffers_released_on_another_thread_return_to_the_pool) {
  constexpr std::uint32_t messages = 50'000;
  buffer_pool pool{buffer_pool_config{{{128, 16}}, true}};
  boost::lockfree::spsc_queue<buffer_slice, boost::lockfree::capacity<64>> queue;
  std::atomic<std::uint32_t> bad{0};

  std::thread consumer{[&] {
    std::uint32_t expected = 0;
    buffer_slice s;
    while (expected < messages) {
      if (!queue.pop(s)) {
        std::this_thread::yield();
        continue;
      }
      std::uint32_t value = 0;
      if (const std::byte* p = s.data(); p != nullptr && s.size() == sizeof value) {
        std::memcpy(&value, p, sizeof value);
      }
      if (value != expected || s.size() != sizeof value) bad.fetch_add(1);
      s.reset();
      ++expected;
    }
  }};
  std::uint64_t backpressure = 0;
  for (std::uint32_t i = 0; i < messages;) {
    buffer b = pool.try_acquire(sizeof i);
    if (!b) {
      ++backpressure;  // every block is queued or being read: wait for the consumer
      std::this_thread::yield();
      continue;
    }
    std::memcpy(b.data(), &i, sizeof i);
    buffer_slice s = std::move(b).slice(0, sizeof i);
    while (!queue.push(s)) std::this_thread::yield();
    ++i;
  }
  consumer.join();

  EXPECT_EQ(bad.load(), 0u);
  const size_class_stats s = pool.stats(0);
  EXPECT_EQ(s.acquired, messages);
  EXPECT_EQ(s.released, messages);
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.exhausted, backpressure);
  EXPECT_LE(s.high_water, 16u);
}

TEST(buffer_pool, bad_config_is_rejected_at_construction) {
  EXPECT_THROW(buffer_pool{buffer_pool_config{}}, std::invalid_argument);
  EXPECT_THROW(buffer_pool(buffer_pool_config{{{100, 4}}, true}), std::invalid_argument);
  EXPECT_THROW(buffer_pool(buffer_pool_config{{{128, 0}}, true}), std::invalid_argument);
  EXPECT_THROW(buffer_pool(buffer_pool_config{{{128, 4}, {128, 8}}, true}), std::invalid_argument);
}

TEST(buffer_pool, default_config_states_its_memory_bound) {
  const buffer_pool_config config = buffer_pool_config::defaults();
  std::size_t payload = 0;
  for (const auto& c : config.classes) payload += c.block_size * c.block_count;
  EXPECT_EQ(payload, std::size_t{84} << 20);
  // Not populated: the bound is what matters here, not 84 MiB of page faults in a unit test.
  buffer_pool pool{buffer_pool_config{config.classes, false}};
  EXPECT_GE(pool.memory_bytes(), payload);
  EXPECT_LT(pool.memory_bytes(), payload + (std::size_t{1} << 20));
}

// -- borrowed_memory: a send lends the caller's bytes instead of copying them

TEST(borrowed_memory, a_loan_views_the_lenders_bytes_without_copying_them) {
  borrowed_memory lent{2};
  std::vector<std::byte> mine(1000, std::byte{7});
  borrowed_memory::loan loan = lent.try_lend(mine);
  ASSERT_TRUE(loan.handle);
  EXPECT_EQ(loan.handle.data(), mine.data());
  EXPECT_EQ(loan.handle.size(), mine.size());
  buffer_slice tail = loan.handle.slice(990, 10);
  EXPECT_EQ(tail.data(), mine.data() + 990);
  EXPECT_FALSE(lent.returned(loan.slot));
  loan.handle.reset();
  EXPECT_FALSE(lent.returned(loan.slot)) << "a slice still holds the memory";
  tail.reset();
  EXPECT_TRUE(lent.returned(loan.slot));
  lent.wait_returned(loan.slot);  // returns at once
}

TEST(borrowed_memory, slots_bound_the_loans_out_and_come_back_after_wait_returned) {
  borrowed_memory lent{2};
  std::byte a[64], b[64], c[64];
  borrowed_memory::loan la = lent.try_lend(a);
  borrowed_memory::loan lb = lent.try_lend(b);
  ASSERT_TRUE(la.handle);
  ASSERT_TRUE(lb.handle);
  EXPECT_NE(la.slot, lb.slot);
  EXPECT_FALSE(lent.try_lend(c).handle) << "both slots are out";
  la.handle.reset();
  EXPECT_FALSE(lent.try_lend(c).handle) << "returned, but not yet collected by its lender";
  lent.wait_returned(la.slot);
  borrowed_memory::loan lc = lent.try_lend(c);
  ASSERT_TRUE(lc.handle);
  EXPECT_EQ(lc.handle.data(), c);
  lb.handle.reset();
  lc.handle.reset();
  lent.wait_returned(lb.slot);
  lent.wait_returned(lc.slot);
}

TEST(borrowed_memory, the_lender_waits_until_the_last_handle_on_another_thread_is_gone) {
  borrowed_memory lent{1};
  std::vector<std::byte> mine(4096, std::byte{1});
  borrowed_memory::loan loan = lent.try_lend(mine);
  ASSERT_TRUE(loan.handle);
  std::atomic<bool> reader_done{false};
  std::atomic<std::uint32_t> sum{0};
  // The "link": reads the lent bytes on its own thread, then drops its handle.
  std::thread link{
      [slice = std::move(loan.handle).slice(0, mine.size()), &reader_done, &sum]() mutable {
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
        std::uint32_t s = 0;
        for (std::byte x : slice.bytes()) s += std::to_integer<std::uint32_t>(x);
        sum.store(s, std::memory_order_relaxed);
        reader_done.store(true, std::memory_order_relaxed);
        slice.reset();
      }};
  lent.wait_returned(loan.slot);
  // The reader is done with the bytes, so the lender may write them (TSan checks the order).
  EXPECT_TRUE(reader_done.load(std::memory_order_relaxed));
  std::fill(mine.begin(), mine.end(), std::byte{0});
  link.join();
  EXPECT_EQ(sum.load(), 4096u);
}

TEST(borrowed_memory, zero_slots_are_rejected) {
  EXPECT_THROW(borrowed_memory{0}, std::invalid_argument);
}

TEST(buffer_pool_death, destroying_borrowed_memory_with_a_loan_out_aborts) {
  EXPECT_DEATH(
      {
        std::byte b[64];
        buffer kept;
        {
          borrowed_memory lent{1};
          kept = lent.try_lend(b).handle;
        }
      },
      "loan is out");
}

TEST(buffer_pool_death, destroying_the_pool_with_buffers_in_use_aborts_with_a_message) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto pool = std::make_unique<buffer_pool>(small_config());
        buffer leaked = pool->try_acquire(1);
        pool.reset();
      },
      "pool must outlive its buffers");
}

TEST(buffer_pool_death, slicing_outside_the_block_aborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  buffer_pool pool{small_config()};
  buffer b = pool.try_acquire(256);
  EXPECT_DEATH((void)b.slice(200, 57), "outside a buffer of 256 bytes");
  EXPECT_DEATH((void)b.slice(0, 10).subslice(5, 6), "outside a buffer of 10 bytes");
}

}  // namespace
}  // namespace vessel::io
