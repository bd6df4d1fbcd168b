// actors::pool_room: an actor that found a pool class empty hears when a block of that class comes
// back, including one that came back between its failed try and its asking; not for another
// class; and the node hands its payload pool's notices out the same way. The pool's own
// available-callback is tested in tests/unit/io/buffer_pool_test.cpp.

#include "actors/pool_room.hpp"

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <caf/all.hpp>

#include "actors/node.hpp"
#include "io/buffer_pool.hpp"
#include "tests/unit/actors/caf_test_support.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

class pool_room_test : public testing::caf_test {};

io::buffer_pool small_pool() {
  return io::buffer_pool{io::buffer_pool_config{{{4096, 2}, {65536, 1}}, false}};
}

/// True if `self` gets a pool_room_atom within `wait`.
bool notified(caf::scoped_actor& self, std::chrono::milliseconds wait) {
  bool got = false;
  self->receive([&](pool_room_atom) { got = true; }, caf::after(wait) >> [] {});
  return got;
}

TEST_F(pool_room_test, a_waiting_actor_hears_when_a_block_of_its_class_comes_back) {
  io::buffer_pool pool = small_pool();
  pool_room room{pool};
  caf::scoped_actor self{sys()};
  std::optional<io::buffer> a{pool.try_acquire(100)}, b{pool.try_acquire(100)};
  ASSERT_TRUE(*a && *b);
  ASSERT_FALSE(pool.try_acquire(100));  // exhausted: what the actor saw

  ASSERT_TRUE(room.notify_when_free(100, caf::actor_cast<caf::actor>(self)));
  EXPECT_EQ(room.waiting(), 1u);
  EXPECT_FALSE(notified(self, 50ms)) << "no block came back yet";

  a.reset();  // the link's ack, say
  EXPECT_TRUE(notified(self, 5s));
  EXPECT_EQ(room.waiting(), 0u) << "one notice per request";
  EXPECT_TRUE(pool.try_acquire(100)) << "the notice came with a block to take";
}

TEST_F(pool_room_test, a_block_back_before_the_actor_asked_is_not_missed) {
  io::buffer_pool pool = small_pool();
  pool_room room{pool};
  caf::scoped_actor self{sys()};
  std::optional<io::buffer> a{pool.try_acquire(100)}, b{pool.try_acquire(100)};
  ASSERT_FALSE(pool.try_acquire(100));
  a.reset();  // its callback fires now, with nobody waiting yet

  ASSERT_TRUE(room.notify_when_free(100, caf::actor_cast<caf::actor>(self)));
  EXPECT_TRUE(notified(self, 5s)) << "the block that came back first must count";
}

TEST_F(pool_room_test, a_block_of_another_class_wakes_nobody) {
  io::buffer_pool pool = small_pool();
  pool_room room{pool};
  caf::scoped_actor self{sys()};
  std::optional<io::buffer> big{pool.try_acquire(65536)};
  std::optional<io::buffer> small1{pool.try_acquire(100)}, small2{pool.try_acquire(100)};
  ASSERT_FALSE(pool.try_acquire(65536));
  ASSERT_FALSE(pool.try_acquire(100));
  ASSERT_TRUE(room.notify_when_free(65536, caf::actor_cast<caf::actor>(self)));

  small1.reset();
  EXPECT_FALSE(notified(self, 50ms)) << "a 4 KiB block holds no 64 KiB message";
  EXPECT_EQ(room.waiting(), 1u);
  big.reset();
  EXPECT_TRUE(notified(self, 5s));
}

TEST_F(pool_room_test, a_size_no_class_holds_is_refused_at_once) {
  io::buffer_pool pool = small_pool();
  pool_room room{pool};
  caf::scoped_actor self{sys()};
  EXPECT_FALSE(room.notify_when_free(65537, caf::actor_cast<caf::actor>(self)));
  EXPECT_EQ(room.waiting(), 0u);
  EXPECT_FALSE(room.notify_when_free(100, caf::actor{})) << "nobody to tell";
}

TEST(pool_room_node_test, the_nodes_payload_pool_tells_an_actor_when_it_has_room) {
  node_config cfg;
  cfg.pool = io::buffer_pool_config{{{4096, 1}}, false};
  vessel::node n{cfg};
  {
    caf::scoped_actor self{n.system()};
    auto held = payload::copy_of(n.pool(), "only block");
    ASSERT_TRUE(held);
    ASSERT_EQ(payload::copy_of(n.pool(), "x").error(), io::errc::pool_exhausted);
    ASSERT_TRUE(n.notify_when_pool_has_room(1, caf::actor_cast<caf::actor>(self)));
    EXPECT_FALSE(notified(self, 50ms));
    held = payload{};
    EXPECT_TRUE(notified(self, 5s));
    EXPECT_TRUE(payload::copy_of(n.pool(), "x"));
  }
  n.stop();
}

TEST(pool_room_node_test, blocking_code_gets_its_payload_once_a_block_is_back) {
  node_config cfg;
  cfg.pool = io::buffer_pool_config{{{4096, 1}}, false};
  vessel::node n{cfg};
  {
    caf::scoped_actor self{n.system()};
    std::optional<payload> held{payload::copy_of(n.pool(), "only block").value()};
    const std::string_view text = "after the wait";
    const auto bytes = std::as_bytes(std::span{text.data(), text.size()});

    auto none = n.copy_when_pool_has_room(self.ptr(), bytes, 50ms);
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error(), io::errc::pool_exhausted) << "the pool stayed empty past the timeout";

    std::thread releaser{[&] {
      std::this_thread::sleep_for(50ms);
      held.reset();  // the link's ack, say, on another thread
    }};
    auto got = n.copy_when_pool_has_room(self.ptr(), bytes, 10s);
    releaser.join();
    ASSERT_TRUE(got) << got.error().message();
    EXPECT_EQ(got.value().view(), text);

    const std::string big(8192, 'x');
    auto too_big = n.copy_when_pool_has_room(self.ptr(),
                                             std::as_bytes(std::span{big.data(), big.size()}), 10s);
    ASSERT_FALSE(too_big);
    EXPECT_EQ(too_big.error(), std::make_error_code(std::errc::message_size));
  }
  n.stop();
}

}  // namespace
}  // namespace vessel::actors
