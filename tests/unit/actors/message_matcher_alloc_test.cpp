// The matcher allocates nothing per message in steady state: nodes come from free lists that grow
// only past a high-water mark. Its own executable because it replaces the global operator new.

#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "actors/message_matcher.hpp"
#include "tests/unit/actors/link_test_support.hpp"

#include "tests/support/counting_new.hpp"

namespace vessel::actors {
namespace {

struct counting_sink final : credit_sink {
  void release(std::uint32_t, std::size_t bytes) override { released += bytes; }
  std::size_t released = 0;
};

TEST(matcher_alloc, post_arrive_match_and_cancel_allocate_nothing_per_message) {
  io::buffer_pool pool{test::small_pool_config(256)};
  counting_sink sink;
  matcher_config c;
  c.world_size = 8;
  c.initial_nodes = 64;
  message_matcher m{c, sink};

  std::uint64_t delivered = 0;
  std::uint64_t errors = 0;
  auto round = [&](std::uint64_t i) {
    const auto src = static_cast<std::uint32_t>(i % 8);
    // Half the messages arrive before their receive (unexpected queue), half after (pending).
    for (int k = 0; k < 16; ++k) {
      auto r = m.arrive(p2p_message{src, i % 4, i, pool.try_acquire(128).slice(0, 128)});
      if (!r)
        ++errors;
      else if (r.value())
        ++delivered;
    }
    for (int k = 0; k < 16; ++k) {
      auto r = m.post_receive(k % 2 == 0 ? src : any_source, i % 4, i);
      if (!r)
        ++errors;
      else if (r.value().message)
        ++delivered;
    }
    for (int k = 0; k < 8; ++k) {
      auto r = m.post_receive(src, 100 + i % 4, i);
      if (!r)
        ++errors;
      else if (!m.cancel(r.value().id))
        ++errors;
    }
    for (int k = 0; k < 16; ++k) {
      auto p = m.post_receive(any_source, 200, i);
      if (!p) ++errors;
    }
    for (int k = 0; k < 16; ++k) {
      auto r = m.arrive(p2p_message{src, 200, i, pool.try_acquire(64).slice(0, 64)});
      if (!r || !r.value())
        ++errors;
      else
        ++delivered;
    }
  };

  for (std::uint64_t i = 0; i < 50; ++i) round(i);  // warm-up: free lists at their high water
  const std::uint64_t before = vessel::test::allocations();
  for (std::uint64_t i = 50; i < 5050; ++i) round(i);
  const std::uint64_t allocations = vessel::test::allocations() - before;

  EXPECT_EQ(errors, 0u);
  EXPECT_EQ(delivered, 5050u * 32);  // 16 via the unexpected queue + 16 to pending receives
  EXPECT_EQ(allocations, 0u) << "allocations on the per-message path";
  EXPECT_EQ(m.stats().unexpected_messages, 0u);
  EXPECT_EQ(m.stats().pending_receives, 0u);
}

}  // namespace
}  // namespace vessel::actors
