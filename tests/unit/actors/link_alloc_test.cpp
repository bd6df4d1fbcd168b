// The link's per-frame path (submit, transmit, receive, ack, consume, grant) allocates nothing.
// Its own executable because it replaces the global operator new to count calls.

#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "actors/link_receiver.hpp"
#include "actors/link_sender.hpp"
#include "tests/unit/actors/link_test_support.hpp"

#include "tests/support/counting_new.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

TEST(link_alloc, submit_transmit_ack_and_receive_allocate_nothing_per_frame) {
  io::buffer_pool pool{test::small_pool_config(64)};
  link_sender_config sc;
  sc.max_unacked_frames = 32;
  sc.max_queued_frames = 32;
  sc.initial_credit = 1u << 20;
  link_sender sender{sc};
  link_receiver_config rc;
  rc.window_bytes = 1u << 20;
  rc.ack_every_frames = 8;
  link_receiver receiver{rc};
  const wire::frame_header header = test::data_header(7);

  std::uint64_t frames = 0;
  std::uint64_t failures = 0;
  auto one_frame = [&](link_time now) {
    io::buffer_slice p = pool.try_acquire(256).slice(0, 256);
    if (!sender.submit(header, std::move(p))) ++failures;
    const outgoing_frame* f = sender.next_transmit();
    if (f == nullptr) {
      ++failures;
      return;
    }
    outgoing_frame on_wire = *f;  // what a send would hold: a header copy and a slice handle
    if (!receiver.on_frame(on_wire.header, now)) ++failures;
    if (auto ack = receiver.poll_ack(now)) {
      if (!sender.on_ack(ack->cumulative_seq)) ++failures;
    }
    auto grant = receiver.on_consumed(on_wire.payload.size());
    if (!grant) ++failures;
    if (grant && grant.value() && !sender.on_credit(grant.value()->bytes)) ++failures;
    ++frames;
  };

  for (int i = 0; i < 100; ++i) one_frame(link_time{i});  // warm-up: nothing lazy left
  const std::uint64_t before = vessel::test::allocations();
  for (int i = 100; i < 10'100; ++i) one_frame(link_time{i});
  const std::uint64_t allocations = vessel::test::allocations() - before;

  EXPECT_EQ(failures, 0u);
  EXPECT_EQ(frames, 10'100u);
  EXPECT_EQ(allocations, 0u) << "allocations on the per-frame path";
  EXPECT_GT(receiver.stats().acks_sent, 0u);
}

}  // namespace
}  // namespace vessel::actors
