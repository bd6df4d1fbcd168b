// The typed interfaces in use: a device actor written against device_actor, called through its
// typed handle; payloads cross actors without their bytes being copied; vessel errors survive
// the trip through caf::error.

#include "actors/actor_interfaces.hpp"

#include <algorithm>
#include <memory>
#include <string>

#include <caf/all.hpp>
#include <gtest/gtest.h>

#include "actors/actor_errc.hpp"
#include "io/buffer_pool.hpp"
#include "io/errc.hpp"
#include "tests/unit/actors/caf_test_support.hpp"

namespace vessel::actors {
namespace {

using testing::caf_test;
using testing::waitable_log;
using namespace std::chrono_literals;

struct fake_device_state {
  std::string name;
  device_stats stats;
  std::vector<device_listener> listeners;
};

// A device that echoes "echo" calls, times out on anything else, and tells its listeners about every
// one-way frame (as a board would report an unsolicited event).
// (It takes a name: CAF 0.17 dereferences a null argument tuple when an actor function takes no
// argument, which UBSan reports.)
device_actor::behavior_type fake_device(device_actor::stateful_pointer<fake_device_state> self,
                                        std::string name) {
  self->state.name = std::move(name);
  return {
      [self](call_atom, const std::string& command, payload& data,
             caf::timespan timeout) -> caf::result<payload> {
        if (command == "echo") {
          ++self->state.stats.calls;
          self->state.stats.bytes_in += data.size();
          return data;
        }
        // A real device would time out waiting for its transport; this one gives up at once.
        (void)timeout;
        ++self->state.stats.call_timeouts;
        return to_caf_error(actor_errc::device_timeout, "'" + command + "' timed out");
      },
      [self](send_atom, const std::string& command, payload& data) {
        ++self->state.stats.sends;
        self->state.stats.bytes_out += data.size();
        for (const auto& l : self->state.listeners) {
          self->send(l, frame_atom::value, self->state.name + "/" + command, data);
        }
        return sent_atom::value;
      },
      [self](listen_atom, device_listener& l) { self->state.listeners.push_back(std::move(l)); },
      [self](unlisten_atom, const device_listener& l) {
        auto& ls = self->state.listeners;
        ls.erase(std::remove(ls.begin(), ls.end(), l), ls.end());
      },
      [self](stats_atom) { return self->state.stats; },
  };
}

struct heard {
  std::string device;
  const std::byte* data;
  std::string text;
};

caf::behavior frame_listener(caf::event_based_actor*, std::shared_ptr<waitable_log<heard>> log) {
  return {[log](frame_atom, const std::string& device, const payload& p) {
    log->push(heard{device, p.bytes().data(), std::string{p.view()}});
  }};
}

io::buffer_pool_config small_pool() {
  io::buffer_pool_config cfg;
  cfg.classes = {io::size_class_config{256, 64}};
  return cfg;
}

class actor_interfaces_test : public caf_test {};

TEST_F(actor_interfaces_test, a_device_is_called_through_its_typed_handle_without_copies) {
  io::buffer_pool pool{small_pool()};
  device_actor dev = sys().spawn(fake_device, std::string{"board"});
  auto log = std::make_shared<waitable_log<heard>>();
  auto listener = caf::actor_cast<device_listener>(sys().spawn(frame_listener, log));
  caf::scoped_actor self{sys()};

  auto ping = payload::copy_of(pool, std::string_view{"ping"}).value();
  const std::byte* where = ping.bytes().data();
  self->request(dev, caf::infinite, call_atom::value, std::string{"echo"}, ping,
                caf::timespan{1s})
      .receive(
          [&](const payload& reply) {
            EXPECT_EQ(reply.view(), "ping");
            EXPECT_EQ(reply.bytes().data(), where);  // the same pooled bytes came back
          },
          [](caf::error& e) { ADD_FAILURE() << describe(e); });

  self->request(dev, caf::infinite, call_atom::value, std::string{"hang"}, payload{},
                caf::timespan{10ms})
      .receive([](const payload&) { ADD_FAILURE() << "the device answered"; },
               [](caf::error& e) {
                 EXPECT_EQ(from_caf_error(e), make_error_code(actor_errc::device_timeout));
                 EXPECT_NE(describe(e).find("'hang'"), std::string::npos) << describe(e);
               });

  self->send(dev, listen_atom::value, listener);
  auto note = payload::copy_of(pool, std::string_view{"button"}).value();
  const std::byte* note_bytes = note.bytes().data();
  self->request(dev, caf::infinite, send_atom::value, std::string{"event"}, std::move(note))
      .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
  ASSERT_TRUE(log->wait_until([](const auto& hs) { return hs.size() == 1; }));
  const auto h = log->snapshot().front();
  EXPECT_EQ(h.device, "board/event");
  EXPECT_EQ(h.text, "button");
  EXPECT_EQ(h.data, note_bytes);

  self->request(dev, caf::infinite, stats_atom::value)
      .receive(
          [](const device_stats& s) {
            EXPECT_EQ(s.calls, 1u);
            EXPECT_EQ(s.call_timeouts, 1u);
            EXPECT_EQ(s.sends, 1u);
            EXPECT_EQ(s.bytes_out, 6u);
          },
          [](caf::error& e) { ADD_FAILURE() << describe(e); });
  // The pool must outlive every payload: a handler's message (holding one) is freed only after
  // the handler returns, which may be after this thread saw its effect. Once both actors are
  // down, nothing of theirs holds a block.
  self->monitor(dev);
  self->monitor(listener);
  self->send_exit(dev, caf::exit_reason::user_shutdown);
  self->send_exit(listener, caf::exit_reason::user_shutdown);
  for (int down = 0; down < 2; ++down) {
    self->receive([](const caf::down_msg&) {});
  }
}

TEST(actor_errc_test, vessel_errors_survive_caf_error_and_exceptions_keep_their_text) {
  const auto e = to_caf_error(io::errc::connection_reset, "rank 3 hung up");
  EXPECT_EQ(from_caf_error(e), make_error_code(io::errc::connection_reset));
  EXPECT_EQ(caf_error_detail(e), "rank 3 hung up");
  EXPECT_NE(describe(e).find("rank 3 hung up"), std::string::npos);
  EXPECT_NE(describe(e).find("vessel.io"), std::string::npos) << describe(e);

  const auto ex = exception_to_caf_error(std::make_exception_ptr(std::runtime_error("oops")));
  EXPECT_EQ(from_caf_error(ex), make_error_code(actor_errc::unhandled_exception));
  EXPECT_EQ(caf_error_detail(ex), "oops");
  EXPECT_FALSE(from_caf_error(caf::error{}));
}

}  // namespace
}  // namespace vessel::actors
