// The reactor -> CAF hand-off: events pushed on a reactor thread arrive at an actor in order and
// in far fewer messages than events; blocks are recycled.

#include "actors/event_batcher.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <caf/all.hpp>
#include <gtest/gtest.h>

#include "io/reactor.hpp"
#include "tests/unit/actors/caf_test_support.hpp"

namespace vessel::actors {
namespace {

using testing::caf_test;
using testing::waitable_log;

struct received {
  std::size_t messages = 0;
  std::vector<std::uint64_t> events;
};

// Appends every batch's events to `out`, counting messages.
caf::behavior collector(caf::event_based_actor*, std::shared_ptr<waitable_log<received>> out) {
  return {[out](const event_batch<std::uint64_t>& batch) {
    received r;
    r.messages = 1;
    r.events.assign(batch.events().begin(), batch.events().end());
    out->push(std::move(r));
  }};
}

std::size_t events_in(const std::vector<received>& rs) {
  std::size_t n = 0;
  for (const auto& r : rs) n += r.events.size();
  return n;
}

class event_batcher_test : public caf_test {
 protected:
  void SetUp() override {
    caf_test::SetUp();
    ASSERT_TRUE(reactor_.start());
  }
  void TearDown() override {
    reactor_.stop();
    caf_test::TearDown();
  }

  // Runs `fn` on the reactor thread and waits for it.
  void on_reactor(std::function<void()> fn) {
    std::promise<void> done;
    ASSERT_TRUE(reactor_.post([&] {
      fn();
      done.set_value();
    }));
    done.get_future().wait();
  }

  io::reactor reactor_;
};

TEST_F(event_batcher_test, ten_thousand_events_arrive_in_order_in_few_messages) {
  auto out = std::make_shared<waitable_log<received>>();
  auto sink = sys().spawn(collector, out);
  constexpr std::uint64_t n = 10'000;
  std::unique_ptr<event_batcher<std::uint64_t>> batcher;
  on_reactor([&] {
    batcher = std::make_unique<event_batcher<std::uint64_t>>(sink, &reactor_);
    for (std::uint64_t i = 0; i < n; ++i) batcher->push(i);  // one reactor turn
  });
  ASSERT_TRUE(out->wait_until([&](const auto& rs) { return events_in(rs) == n; }));
  const auto rs = out->snapshot();
  std::vector<std::uint64_t> all;
  for (const auto& r : rs) all.insert(all.end(), r.events.begin(), r.events.end());
  ASSERT_EQ(all.size(), n);
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(all[i], i) << "out of order at " << i;
  // max_events = 1024: 10 hand-offs, not 10,000.
  EXPECT_LE(rs.size(), 10u);
  on_reactor([&] {
    EXPECT_EQ(batcher->stats().events, n);
    EXPECT_EQ(batcher->stats().batches, rs.size());
  });
  reactor_.stop();  // no flush of it may still be posted when it goes
  batcher.reset();
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

TEST_F(event_batcher_test, one_hand_off_per_reactor_turn_and_blocks_are_recycled) {
  auto out = std::make_shared<waitable_log<received>>();
  auto sink = sys().spawn(collector, out);
  std::unique_ptr<event_batcher<std::uint64_t>> batcher;
  on_reactor([&] { batcher = std::make_unique<event_batcher<std::uint64_t>>(sink, &reactor_); });
  constexpr int turns = 50;
  constexpr std::uint64_t per_turn = 37;
  for (int t = 0; t < turns; ++t) {
    on_reactor([&, t] {
      for (std::uint64_t i = 0; i < per_turn; ++i) batcher->push(t * per_turn + i);
    });
    // The next turn flushes; wait for it so that turns stay apart.
    ASSERT_TRUE(out->wait_until(
        [&](const auto& rs) { return events_in(rs) == (t + 1) * per_turn; }));
  }
  const auto rs = out->snapshot();
  EXPECT_EQ(rs.size(), static_cast<std::size_t>(turns));  // exactly one hand-off per turn
  std::uint64_t expect = 0;
  for (const auto& r : rs) {
    for (auto e : r.events) ASSERT_EQ(e, expect++);
  }
  on_reactor([&] {
    // Each batch goes back to the free list once the collector is done with it, so a few blocks
    // serve all 50 turns (more than one only when a turn starts before the last block is back).
    EXPECT_LE(batcher->stats().blocks_created, 10u);
  });
  reactor_.stop();
  batcher.reset();
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

TEST_F(event_batcher_test, without_a_reactor_the_owner_flushes_and_batches_outlive_the_batcher) {
  auto out = std::make_shared<waitable_log<received>>();
  auto sink = sys().spawn(collector, out);
  {
    event_batcher<std::uint64_t> batcher{sink, nullptr, event_batcher_config{4, 4, 2}};
    for (std::uint64_t i = 0; i < 10; ++i) batcher.push(i);  // two full batches of 4 go at once
    EXPECT_EQ(batcher.pending(), 2u);
    EXPECT_EQ(batcher.stats().batches, 2u);
  }  // the destructor sends the last 2; their block returns to a list that outlives the batcher
  ASSERT_TRUE(out->wait_until([](const auto& rs) { return events_in(rs) == 10; }));
  EXPECT_EQ(out->snapshot().size(), 3u);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

// Blocks hold their free list, which holds the blocks kept for reuse: the batcher's end breaks
// that cycle (LeakSanitizer, in the dev preset, reports a block or list left behind).
TEST(event_batcher_lifetime, a_batch_kept_past_its_batcher_is_freed_when_dropped) {
  std::vector<event_batch<std::uint64_t>> kept;
  {
    event_batcher<std::uint64_t> batcher{
        [&kept](event_batch<std::uint64_t>&& b) { kept.push_back(std::move(b)); }, nullptr,
        event_batcher_config{2, 2, 4}};
    for (std::uint64_t i = 0; i < 6; ++i) batcher.push(i);  // three batches of 2
    kept.erase(kept.begin());  // its block goes to the free list
    batcher.push(6);           // and is taken again
  }  // sends {6}; frees what the list kept
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].events(), (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(kept[2].events(), (std::vector<std::uint64_t>{6}));
  auto copy = kept[1];
  kept.clear();  // two blocks freed, one still held by the copy
  EXPECT_EQ(copy.events(), (std::vector<std::uint64_t>{4, 5}));
}

}  // namespace
}  // namespace vessel::actors
