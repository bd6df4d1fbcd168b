// A rank actor on the reactor thread takes the reactor's batches, and single arrivals, as calls
// (rank_direct_entry): between its runs a batch is matched at once; a batch that had to go as a
// message (sent off the reactor thread, or while the actor ran) holds every later one back until
// the actor has taken it, so arrivals keep their order either way. A rank actor on CAF's workers
// has no such entry.

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <string_view>

#include <gtest/gtest.h>
#include <caf/all.hpp>

#include "actors/rank_actor.hpp"
#include "actors/reactor_hosted.hpp"
#include "io/buffer_pool.hpp"
#include "io/reactor.hpp"
#include "tests/unit/actors/caf_test_support.hpp"
#include "tests/unit/actors/reactor_hold.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;
using testing::caf_test;

constexpr std::uint32_t peer = 1;
constexpr std::uint64_t tag = 7;

std::string text_of(const io::buffer_slice& s) {
  return {reinterpret_cast<const char*>(s.data()), s.size()};
}

class rank_direct_entry_test : public caf_test {
 protected:
  void SetUp() override {
    caf_test::SetUp();
    ASSERT_TRUE(reactor_.start());
    unit_ = std::make_unique<reactor_execution_unit>(sys(), reactor_);
    out_ = std::make_shared<outbox>(reactor_, outbox_config{.world_size = 2});
    rank_ = spawn_rank_actor(sys(), rank_actor_config{.self_rank = 0, .world_size = 2}, out_,
                             unit_.get());
    entry_ = direct_entry_of(rank_);
  }
  void TearDown() override {
    {
      caf::scoped_actor self{sys()};
      testing::kill_and_wait(self, caf::actor_cast<caf::actor>(rank_));
    }
    rank_ = nullptr;
    reactor_.stop();
    caf_test::TearDown();
  }

  // One message from `peer` with `text`, in a batch of its own; `took` says whether the entry
  // took it, else it went to the actor as a message. Runs on the calling thread.
  bool hand_over(std::string_view text) {
    bool took = false;
    event_batcher<inbound_message> batcher{[&](event_batch<inbound_message>&& b) {
      took = entry_->take(b);
      if (!took) caf::anon_send(rank_, std::move(b));
    }};
    auto block = pool_.try_acquire(text.size());
    EXPECT_TRUE(block);
    std::memcpy(block.data(), text.data(), text.size());
    batcher.push(inbound_message{peer, tag, ++message_id_, std::move(block).slice(0, text.size())});
    batcher.flush();
    return took;
  }

  inbound_message arrival(std::string_view text) {
    auto block = pool_.try_acquire(text.size());
    EXPECT_TRUE(block);
    std::memcpy(block.data(), text.data(), text.size());
    return inbound_message{peer, tag, ++message_id_, std::move(block).slice(0, text.size())};
  }

  // One message handed over alone (take_arrival), on the reactor thread; true when the entry
  // took it.
  bool hand_over_alone_on_reactor(std::string_view text) {
    std::promise<bool> took;
    EXPECT_TRUE(reactor_.post([&] {
      auto m = arrival(text);
      took.set_value(entry_->take_arrival(m));
    }));
    return took.get_future().get();
  }

  // The same on the reactor thread.
  bool hand_over_on_reactor(std::string_view text) {
    std::promise<bool> took;
    EXPECT_TRUE(reactor_.post([&] { took.set_value(hand_over(text)); }));
    return took.get_future().get();
  }

  std::string receive() {
    caf::scoped_actor self{sys()};
    std::string got;
    self->request(rank_, 5s, recv_atom::value, peer, tag, caf::timespan{5s})
        .receive([&](const envelope& e) { got = std::string{e.data.view()}; },
                 [](caf::error& e) { FAIL() << caf::to_string(e); });
    return got;
  }

  // Returns once the actor has run (made its behaviour, taken what was sent before).
  void sync() {
    caf::scoped_actor self{sys()};
    self->request(rank_, 5s, stats_atom::value)
        .receive([](const rank_stats&) {}, [](caf::error& e) { FAIL() << caf::to_string(e); });
  }

  io::reactor reactor_;
  io::buffer_pool pool_{io::buffer_pool_config{{{4096, 64}}, false}};
  std::unique_ptr<reactor_execution_unit> unit_;
  std::shared_ptr<outbox> out_;
  rank_impl_actor rank_;
  rank_direct_entry* entry_ = nullptr;
  std::uint64_t message_id_ = 0;
};

TEST_F(rank_direct_entry_test, between_runs_a_batch_is_taken_at_once_on_the_reactor_thread) {
  ASSERT_NE(entry_, nullptr);
  sync();
  EXPECT_TRUE(hand_over_on_reactor("one"));
  EXPECT_TRUE(hand_over_on_reactor("two"));
  EXPECT_EQ(receive(), "one");
  EXPECT_EQ(receive(), "two");
  EXPECT_TRUE(hand_over_on_reactor("three"));
  EXPECT_EQ(receive(), "three");
}

TEST_F(rank_direct_entry_test, off_the_reactor_thread_a_batch_goes_as_a_message) {
  ASSERT_NE(entry_, nullptr);
  sync();
  EXPECT_FALSE(hand_over("elsewhere"));
  EXPECT_EQ(receive(), "elsewhere");
  sync();
  EXPECT_TRUE(hand_over_on_reactor("back on the reactor"));  // the message was counted off
  EXPECT_EQ(receive(), "back on the reactor");
}

TEST_F(rank_direct_entry_test, a_batch_still_in_the_mailbox_holds_later_ones_back) {
  ASSERT_NE(entry_, nullptr);
  sync();
  std::promise<bool> second_taken;
  {
    testing::reactor_hold hold{reactor_};
    // Runs on the reactor once the hold ends, before the actor's run that takes "first".
    ASSERT_TRUE(reactor_.post([&] { second_taken.set_value(hand_over("second")); }));
    EXPECT_FALSE(hand_over("first"));  // off the reactor thread: to the mailbox, run queued
  }
  EXPECT_FALSE(second_taken.get_future().get());  // would have overtaken "first"
  EXPECT_EQ(receive(), "first");
  EXPECT_EQ(receive(), "second");
  sync();
  EXPECT_TRUE(hand_over_on_reactor("third"));
  EXPECT_EQ(receive(), "third");
}

TEST_F(rank_direct_entry_test,
       between_runs_one_arrival_is_taken_alone_and_completes_a_waiting_receive) {
  ASSERT_NE(entry_, nullptr);
  sync();
  EXPECT_TRUE(hand_over_alone_on_reactor("one"));  // unexpected until a receive comes
  EXPECT_TRUE(hand_over_on_reactor("two"));        // alone and in batches, in arrival order
  EXPECT_TRUE(hand_over_alone_on_reactor("three"));
  EXPECT_EQ(receive(), "one");
  EXPECT_EQ(receive(), "two");
  EXPECT_EQ(receive(), "three");

  // A receive that waits in the actor is answered by the arrival taken alone.
  caf::scoped_actor self{sys()};
  auto waiting = self->request(rank_, 5s, recv_atom::value, peer, tag, caf::timespan{5s});
  sync();  // the receive is posted
  EXPECT_TRUE(hand_over_alone_on_reactor("four"));
  waiting.receive([](const envelope& e) { EXPECT_EQ(e.data.view(), "four"); },
                  [](caf::error& e) { FAIL() << caf::to_string(e); });
  // Counted as a hand-off each, as a batch is.
  self->request(rank_, 5s, stats_atom::value)
      .receive([](const rank_stats& s) { EXPECT_EQ(s.batches, 4u); },
               [](caf::error& e) { FAIL() << caf::to_string(e); });
}

TEST_F(rank_direct_entry_test, a_batch_still_in_the_mailbox_holds_a_lone_arrival_back_untouched) {
  ASSERT_NE(entry_, nullptr);
  sync();
  std::promise<bool> second_taken;
  inbound_message left;
  {
    testing::reactor_hold hold{reactor_};
    // Runs on the reactor once the hold ends, before the actor's run that takes "first".
    ASSERT_TRUE(reactor_.post([&] {
      auto m = arrival("second");
      const bool taken = entry_->take_arrival(m);
      left = std::move(m);
      second_taken.set_value(taken);
    }));
    EXPECT_FALSE(hand_over("first"));  // off the reactor thread: to the mailbox, run queued
  }
  EXPECT_FALSE(second_taken.get_future().get());  // would have overtaken "first"
  EXPECT_EQ(text_of(left.payload), "second");     // still the caller's to batch
  EXPECT_EQ(receive(), "first");
  sync();
  EXPECT_TRUE(hand_over_alone_on_reactor("third"));
  EXPECT_EQ(receive(), "third");
}

TEST_F(rank_direct_entry_test, off_the_reactor_thread_a_lone_arrival_is_left_to_the_caller) {
  ASSERT_NE(entry_, nullptr);
  sync();
  auto m = arrival("elsewhere");
  EXPECT_FALSE(entry_->take_arrival(m));
  EXPECT_EQ(text_of(m.payload), "elsewhere");
}

TEST_F(rank_direct_entry_test, a_rank_actor_on_cafs_workers_has_no_direct_entry) {
  auto on_caf = spawn_rank_actor(sys(), rank_actor_config{.self_rank = 0, .world_size = 2}, out_);
  EXPECT_EQ(direct_entry_of(on_caf), nullptr);
  {
    caf::scoped_actor self{sys()};
    testing::kill_and_wait(self, caf::actor_cast<caf::actor>(on_caf));
  }
}

}  // namespace
}  // namespace vessel::actors
