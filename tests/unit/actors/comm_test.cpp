// vessel::comm in one process (a singleton world: every message goes to self through the mesh,
// the matcher and the runtime's batched hand-off): matching, chunking of large messages, typed
// timeouts, non-blocking handles, reserved tags. Multi-process behaviour is in
// tests/integration/p2p_launch_test.cpp.

#include <chrono>
#include <cstring>
#include <numeric>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "actors/comm.hpp"
#include "actors/runtime.hpp"

namespace vessel {
namespace {

using namespace std::chrono_literals;

std::vector<std::byte> bytes_of(std::size_t n, std::uint8_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return v;
}

class comm_test : public ::testing::Test {
 protected:
  comm c_ = comm::init(actors::env_view::from_map({}));
};

TEST_F(comm_test, singleton_world_is_rank_0_of_1) {
  EXPECT_EQ(c_.rank(), 0u);
  EXPECT_EQ(c_.size(), 1u);
}

TEST_F(comm_test, message_to_self_arrives_with_its_source_tag_and_bytes) {
  const auto data = bytes_of(1000, 3);
  c_.send(data, 0, 42);
  std::vector<std::byte> got(2000);
  recv_status st = c_.recv(got, 0, 42, 10s);
  EXPECT_EQ(st.source, 0u);
  EXPECT_EQ(st.tag, 42u);
  ASSERT_EQ(st.bytes, 1000u);
  EXPECT_EQ(std::memcmp(got.data(), data.data(), 1000), 0);
}

TEST_F(comm_test, wildcard_receives_follow_arrival_order_and_specific_tags_skip_ahead) {
  for (std::uint64_t tag = 1; tag <= 3; ++tag) {
    const auto d = bytes_of(16, static_cast<std::uint8_t>(tag));
    c_.send(d, 0, tag);
  }
  recv_status st;
  auto third = c_.recv(0, 3, 10s, &st);
  EXPECT_EQ(st.tag, 3u);
  c_.recv(any_source, any_tag, 10s, &st);
  EXPECT_EQ(st.tag, 1u);
  c_.recv(any_source, any_tag, 10s, &st);
  EXPECT_EQ(st.tag, 2u);
}

TEST_F(comm_test, messages_larger_than_a_block_are_cut_and_rebuilt_in_order) {
  // 9 MiB + 5: three chunks of the 4 MiB class, several in flight at once.
  const auto data = bytes_of((9u << 20) + 5, 7);
  auto pending = c_.irecv(0, 5);
  c_.send(data, 0, 5);
  recv_status st = pending.wait(30s);
  EXPECT_EQ(st.bytes, data.size());
  EXPECT_EQ(pending.take_data(), data);
}

TEST_F(comm_test, empty_message_is_a_message) {
  c_.send({}, 0, 9);
  recv_status st;
  auto got = c_.recv(0, 9, 10s, &st);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(st.bytes, 0u);
}

TEST_F(comm_test, receive_timeout_throws_naming_the_peer_and_tag) {
  try {
    c_.recv(0, 77, 50ms);
    FAIL() << "no exception";
  } catch (const comm_timeout& e) {
    EXPECT_EQ(e.peer(), 0u);
    EXPECT_EQ(e.tag(), 77u);
    EXPECT_EQ(e.code(), actors::comm_errc::receive_timeout);
    EXPECT_NE(std::string{e.what()}.find("rank 0 with tag 77"), std::string::npos) << e.what();
  }
  // The cancelled receive took nothing: a later message still reaches the next receive.
  const auto d = bytes_of(8, 1);
  c_.send(d, 0, 77);
  EXPECT_EQ(c_.recv(0, 77, 10s), d);
}

TEST_F(comm_test, message_that_does_not_fit_throws_and_is_consumed) {
  const auto d = bytes_of(100, 2);
  c_.send(d, 0, 4);
  std::vector<std::byte> small(10);
  EXPECT_THROW(c_.recv(small, 0, 4, 10s), comm_error);
  EXPECT_THROW(c_.recv(small, 0, 4, 20ms), comm_timeout) << "the message was consumed";
}

TEST_F(comm_test, reserved_tags_and_absent_ranks_are_refused) {
  const auto d = bytes_of(8, 1);
  try {
    c_.send(d, 0, actors::reserved_tag_base + 1);
    FAIL();
  } catch (const comm_error& e) {
    EXPECT_EQ(e.code(), actors::comm_errc::tag_reserved);
  }
  EXPECT_THROW(c_.send(d, 1, 1), comm_error);
}

TEST_F(comm_test, isend_copies_the_bytes_so_the_buffer_may_change_at_once) {
  auto d = bytes_of(4096, 9);
  const auto original = d;
  comm_request s = c_.isend(d, 0, 11);
  std::fill(d.begin(), d.end(), std::byte{0});
  s.wait();
  EXPECT_EQ(c_.recv(0, 11, 10s), original);
}

TEST_F(comm_test, dropping_an_unfinished_irecv_cancels_it) {
  { comm_request r = c_.irecv(0, 12); }
  const auto d = bytes_of(8, 4);
  c_.send(d, 0, 12);
  EXPECT_EQ(c_.recv(0, 12, 10s), d);
}

TEST_F(comm_test, barrier_and_allreduce_on_one_rank_leave_data_as_is) {
  c_.barrier(1s);
  std::vector<double> v{1.5, -2.0};
  c_.allreduce<double>(v, reduce_op::sum);
  EXPECT_EQ(v, (std::vector<double>{1.5, -2.0}));
}

TEST_F(comm_test, thousands_of_small_messages_keep_their_order) {
  constexpr int n = 5000;
  std::thread sender{[&] {
    for (int i = 0; i < n; ++i) c_.send(std::as_bytes(std::span{&i, 1}), 0, 3);
  }};
  for (int i = 0; i < n; ++i) {
    int got = -1;
    c_.recv(std::as_writable_bytes(std::span{&got, 1}), 0, 3, 30s);
    ASSERT_EQ(got, i);
  }
  sender.join();
  EXPECT_GE(c_.matching_stats().arrived, static_cast<std::uint64_t>(n));
}

TEST_F(comm_test, a_request_that_signals_events_wakes_a_thread_sleeping_on_them) {
  actors::runtime& rt = c_.runtime();
  // Nothing signals: the sleep ends on its deadline with the word unchanged.
  const std::uint32_t quiet = rt.events();
  EXPECT_FALSE(rt.wait_events(quiet, std::chrono::steady_clock::now() + 20ms));

  // A receive posted before its message: the sleeper is woken by its completion alone (the
  // deadline is far away), and the request is done by then.
  actors::p2p_request receive;
  receive.signal_events(true);
  actors::p2p_request::make_receive(receive, 0, 77);
  const std::uint32_t seen = rt.events();
  rt.submit(receive);
  std::thread sender{[&] {
    std::this_thread::sleep_for(10ms);
    const auto d = bytes_of(8, 5);
    c_.send(d, 0, 77);
  }};
  for (std::uint32_t now_seen = seen; !receive.done(); now_seen = rt.events()) {
    ASSERT_TRUE(rt.wait_events(now_seen, std::chrono::steady_clock::now() + 60s));
  }
  sender.join();
  EXPECT_NE(rt.events(), seen);
  EXPECT_FALSE(receive.error);
  EXPECT_EQ(receive.source, 0u);
  EXPECT_EQ(receive.matched_tag, 77u);
  EXPECT_GE(receive.payload.size(), 8u);

  // A request that did not ask leaves the word alone.
  actors::p2p_request silent;
  actors::p2p_request::make_receive(silent, 0, 78);
  const auto d = bytes_of(8, 6);
  c_.send(d, 0, 78);
  const std::uint32_t before = rt.events();
  rt.submit(silent);
  silent.wait();
  EXPECT_FALSE(silent.error);
  EXPECT_EQ(rt.events(), before);
}

TEST_F(comm_test, finalize_is_idempotent_and_later_calls_throw) {
  c_.finalize();
  c_.finalize();
  EXPECT_THROW(c_.send({}, 0, 1), comm_error);
}

}  // namespace
}  // namespace vessel

namespace vessel::actors {
namespace {

TEST(comm_thresholds, byte_counts_that_are_not_numbers_are_refused_naming_the_variable) {
  for (const char* name : {"VESSEL_PULL_BYTES", "VESSEL_LEND_BYTES"}) {
    for (const char* value : {"1M", "-1", ""}) {
      try {
        comm::init(actors::env_view::from_map({{name, value}}));
        ADD_FAILURE() << name << "=" << value << " accepted";
      } catch (const comm_error& e) {
        EXPECT_NE(std::string{e.what()}.find(std::string{name} + "=" + value + ": not a byte count"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

TEST_F(comm_test, a_large_message_to_self_is_copied_not_offered) {
  // Pulls are for other ranks on this host: to itself a rank hands the bytes over locally.
  std::vector<std::byte> out(std::size_t{512} << 10, std::byte{0x3c});
  c_.send(out, 0, 4);
  EXPECT_EQ(c_.recv(0, 4, 5s), out);
  EXPECT_EQ(c_.pull_stats().offered, 0u);
}

TEST(runtime_progress_options, vessel_progress_selects_who_drives_and_refuses_anything_else) {
  runtime_options o = runtime_options::defaults();
  EXPECT_TRUE(o.progress.enabled) << "caller-driven progress is the default";
  ASSERT_TRUE(o.apply_env(env_view::from_map({{"VESSEL_PROGRESS", "thread"},
                                              {"VESSEL_PROGRESS_SPIN_US", "50"}})));
  EXPECT_FALSE(o.progress.enabled);
  EXPECT_EQ(o.progress.spin, std::chrono::microseconds{50});
  ASSERT_TRUE(o.apply_env(env_view::from_map({{"VESSEL_PROGRESS", "caller"}})));
  EXPECT_TRUE(o.progress.enabled);
  auto bad = o.apply_env(env_view::from_map({{"VESSEL_PROGRESS", "sometimes"}}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().detail.find("VESSEL_PROGRESS"), std::string::npos) << bad.error().detail;
  EXPECT_FALSE(o.apply_env(env_view::from_map({{"VESSEL_PROGRESS_SPIN_US", "-3"}})));
}

TEST(runtime_progress_options, vessel_yield_when_idle_is_automatic_unless_set_to_0_or_1) {
  runtime_options o = runtime_options::defaults();
  EXPECT_FALSE(o.progress.yield_when_idle.has_value())
      << "unset: decided by ranks per host and CPUs";
  EXPECT_TRUE(o.progress.waiters_yield(3, 2)) << "more ranks on the host than CPUs";
  EXPECT_FALSE(o.progress.waiters_yield(2, 2));
  ASSERT_TRUE(o.apply_env(env_view::from_map({{"VESSEL_YIELD_WHEN_IDLE", "1"}})));
  EXPECT_EQ(o.progress.yield_when_idle, std::optional<bool>{true});
  ASSERT_TRUE(o.apply_env(env_view::from_map({{"VESSEL_YIELD_WHEN_IDLE", "0"}})));
  EXPECT_EQ(o.progress.yield_when_idle, std::optional<bool>{false});
  EXPECT_FALSE(o.progress.waiters_yield(8, 2)) << "set: whatever the host runs";
  auto bad = o.apply_env(env_view::from_map({{"VESSEL_YIELD_WHEN_IDLE", "yes"}}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().detail.find("VESSEL_YIELD_WHEN_IDLE"), std::string::npos)
      << bad.error().detail;
}

TEST(runtime_progress_options, both_modes_deliver_messages_to_self_and_time_out_a_receive) {
  for (const char* mode : {"caller", "thread", "caller-yielding"}) {
    const bool yielding = std::string_view{mode} == "caller-yielding";
    comm c = comm::init(env_view::from_map(
        {{"VESSEL_PROGRESS", yielding ? "caller" : mode}, {"VESSEL_YIELD_WHEN_IDLE", yielding ? "1" : "0"}}));
    const std::vector<std::byte> data(100, std::byte{7});
    c.send(data, 0, 5);
    std::vector<std::byte> got(100);
    const auto st = c.recv(got, 0, 5, std::chrono::seconds{10});
    EXPECT_EQ(st.bytes, 100u) << mode;
    EXPECT_EQ(got, data) << mode;
    EXPECT_THROW(c.recv(got, 0, 6, std::chrono::milliseconds{20}), comm_timeout) << mode;
  }
}

}  // namespace
}  // namespace vessel::actors
