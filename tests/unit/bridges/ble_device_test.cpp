// The BLE device actor under a vessel::node's supervision, against the BlueZ emulation: GATT reads,
// writes and typed errors through (call, UUID, ...), notifications to listeners, link loss with
// reconnect, re-subscribe, payload size re-read and the outage told to watchers, a request in
// flight during the outage retried, a first connect that fails restarted by the supervisor, a
// request held when the actor is stopped answered, and
// vessel frames exchanged with an emulated NUS board through the actor.

#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/actor_errc.hpp"
#include "actors/node.hpp"
#include "ble_fixture.hpp"
#include "bridges/ble/device_actor.hpp"
#include "wire/crc32c.hpp"
#include "wire/frame_codec.hpp"

namespace vessel::bridges::ble::testing {
namespace {

using namespace std::chrono_literals;
using actors::payload;

constexpr const char* level_uuid = "00002a19-0000-1000-8000-00805f9b34fb";

/// What a listener actor saw, waited on from the test thread.
struct inbox {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<std::string, std::string>> frames;  // (source, bytes)
  std::vector<ble_outage> outages;

  template <class Pred>
  bool wait(Pred pred, std::chrono::seconds limit = 20s) {
    std::unique_lock lock{mutex};
    return changed.wait_for(lock, limit, [&] { return pred(*this); });
  }
};

ble_listener::behavior_type listener_impl(ble_listener::pointer, std::shared_ptr<inbox> box) {
  return {
      [box](actors::frame_atom, const std::string& source, const payload& data) {
        const std::lock_guard lock{box->mutex};
        box->frames.emplace_back(source, std::string{data.view()});
        box->changed.notify_all();
      },
      [box](const ble_outage& o) {
        const std::lock_guard lock{box->mutex};
        box->outages.push_back(o);
        box->changed.notify_all();
      },
  };
}

class ble_device : public ble_env {
 protected:
  void extra_teardown() override {
    for (const auto& l : listeners_) caf::anon_send_exit(l, caf::exit_reason::user_shutdown);
    listeners_.clear();
    if (node_) node_->stop();
    node_.reset();
  }

  void make_node() {
    node_config nc;
    nc.supervision.restart_backoff.initial_delay = 20ms;
    nc.supervision.restart_backoff.jitter = false;
    nc.pool.classes = {io::size_class_config{4096, 256}};
    node_ = std::make_unique<vessel::node>(nc);
  }

  ble_device_config config(const char* addr, std::string name) {
    ble_device_config c;
    c.name = std::move(name);
    c.peripheral.address = addr;
    c.peripheral.connect_timeout = 3s;
    c.peripheral.request_timeout = 8s;
    c.peripheral.reconnect = io::reconnect_policy{20ms, 200ms, 2.0, 0, false};
    return c;
  }

  ble_device_actor spawn(ble_device_config c) {
    if (!node_) make_node();
    auto a = node_->spawn_supervised(make_ble_device_child(node_->reactor(), node_->pool(), c));
    EXPECT_TRUE(a) << (a ? "" : a.error().message());
    return a ? caf::actor_cast<ble_device_actor>(a.value()) : ble_device_actor{};
  }

  payload bytes(std::string_view text) {
    auto p = payload::copy_of(node_->pool(), text);
    EXPECT_TRUE(p);
    return p ? std::move(p).value() : payload{};
  }

  /// (call, command, data) -> the reply's bytes or the vessel error.
  result<std::string> call(const ble_device_actor& dev, std::string command, payload data,
                           caf::timespan timeout = caf::timespan{8s}) {
    caf::scoped_actor self{node_->system()};
    result<std::string> out{std::make_error_code(std::errc::timed_out)};
    self->request(dev, 30s, actors::call_atom::value, std::move(command), std::move(data), timeout)
        .receive([&](payload& p) { out = std::string{p.view()}; },
                 [&](caf::error& e) {
                   out = actors::from_caf_error(e);
                   last_error_ = actors::describe(e);
                 });
    return out;
  }

  result<void> send(const ble_device_actor& dev, std::string command, payload data) {
    caf::scoped_actor self{node_->system()};
    result<void> out{std::make_error_code(std::errc::timed_out)};
    self->request(dev, 30s, actors::send_atom::value, std::move(command), std::move(data))
        .receive([&](actors::sent_atom) { out = outcome::success(); },
                 [&](caf::error& e) { out = actors::from_caf_error(e); });
    return out;
  }

  ble_device_status status(const ble_device_actor& dev) {
    caf::scoped_actor self{node_->system()};
    ble_device_status s;
    self->request(dev, 30s, actors::status_atom::value)
        .receive([&](ble_device_status& r) { s = r; }, [&](caf::error& e) {
          ADD_FAILURE() << actors::describe(e);
        });
    return s;
  }

  actors::device_stats stats(const ble_device_actor& dev) {
    caf::scoped_actor self{node_->system()};
    actors::device_stats s;
    self->request(dev, 30s, actors::stats_atom::value)
        .receive([&](actors::device_stats& r) { s = r; }, [&](caf::error& e) {
          ADD_FAILURE() << actors::describe(e);
        });
    return s;
  }

  ble_listener listen(const ble_device_actor& dev, const std::shared_ptr<inbox>& box) {
    auto l = node_->system().spawn(listener_impl, box);
    caf::anon_send(dev, actors::listen_atom::value, actors::device_listener{l});
    caf::anon_send(dev, watch_atom::value, l);
    listeners_.push_back(l);
    return l;
  }

  /// Emits a notification from the peripheral until it is delivered (the subscription may still
  /// be on its way after a reconnect).
  void emit_until_delivered(const std::string& char_path, std::vector<std::uint8_t> v) {
    bool delivered = false;
    for (int i = 0; i < 2000 && !delivered; ++i) {
      mock_proxy_->callMethod("EmitNotification")
          .onInterface("org.bluez.Mock")
          .withArguments(sdbus::ObjectPath{char_path}, v)
          .storeResultsTo(delivered);
      if (!delivered) std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(delivered) << "never subscribed to " << char_path;
  }

  std::unique_ptr<vessel::node> node_;
  std::vector<ble_listener> listeners_;
  std::string last_error_;
};

TEST_F(ble_device, reads_writes_and_notifies_through_calls_and_listeners) {
  auto c = config(known_addr, "sensor");
  c.notify = {"2a19"};
  auto dev = spawn(c);
  ASSERT_TRUE(dev);
  auto level = call(dev, "2a19", payload{});
  ASSERT_TRUE(level) << last_error_;
  EXPECT_EQ(level.value(), std::string(1, char{87}));

  // A write the characteristic's flags forbid: BlueZ's NotPermitted, typed, naming both.
  auto refused = call(dev, "2a19", bytes("x"));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), make_error_code(errc::not_permitted));
  EXPECT_NE(last_error_.find(known_addr), std::string::npos) << last_error_;
  EXPECT_NE(last_error_.find(level_uuid), std::string::npos) << last_error_;
  // An encrypted characteristic: the device actor pairs and reads it.
  auto secret = call(dev, "2a3d", payload{});
  ASSERT_TRUE(secret) << last_error_;
  EXPECT_EQ(secret.value(), "secret");
  // A one-way write to a characteristic without write-without-response: refused, typed.
  auto one_way = send(dev, "2a19", bytes("y"));
  ASSERT_FALSE(one_way);
  EXPECT_EQ(one_way.error(), make_error_code(errc::not_permitted));
  // A frame call without a frame mode.
  auto no_frames = call(dev, ble_frame_command, bytes("z"));
  ASSERT_FALSE(no_frames);
  EXPECT_EQ(no_frames.error(), make_error_code(errc::not_supported));

  auto box = std::make_shared<inbox>();
  listen(dev, box);
  const auto level_path = std::string{known_dev} + "/service0010/char0011";
  emit_until_delivered(level_path, {42});
  ASSERT_TRUE(box->wait([](inbox& b) { return !b.frames.empty(); }));
  {
    const std::lock_guard lock{box->mutex};
    EXPECT_EQ(box->frames[0].first, std::string{"sensor/"} + level_uuid);
    EXPECT_EQ(box->frames[0].second, std::string(1, char{42}));
  }
  const auto s = stats(dev);
  EXPECT_EQ(s.calls, 2u);
  EXPECT_EQ(s.call_errors, 3u);
  EXPECT_GE(s.unsolicited, 1u);
  EXPECT_GE(s.bytes_in, 7u);  // 87, "secret", 42
  const auto st = status(dev);
  EXPECT_EQ(st.state, link_state::ready);
  EXPECT_EQ(st.link.connects, 1u);
  EXPECT_EQ(st.payload_size, 244u);
}

TEST_F(ble_device, link_loss_is_repaired_and_told_while_a_request_in_flight_is_retried) {
  auto c = config(known_addr, "sensor");
  c.notify = {"2a19"};
  auto dev = spawn(c);
  ASSERT_TRUE(dev);
  ASSERT_TRUE(call(dev, "2a19", payload{})) << last_error_;  // the link is up
  auto box = std::make_shared<inbox>();
  listen(dev, box);
  const auto level_path = std::string{known_dev} + "/service0010/char0011";
  emit_until_delivered(level_path, {1});

  // The next link negotiates a smaller MTU and needs three attempts; the read issued now is on the
  // air when the link dies, so the peripheral resends it on the next link.
  mock("SetMtu", std::uint16_t{100});
  mock("FailNextConnects", sdbus::ObjectPath{known_dev}, 2u, std::string{"Failed"});
  mock("DropOnNextAccess", sdbus::ObjectPath{known_dev});
  auto retried = call(dev, "2a19", payload{});
  ASSERT_TRUE(retried) << last_error_;
  EXPECT_EQ(retried.value(), std::string(1, char{1}));  // the value last notified

  ASSERT_TRUE(box->wait([](inbox& b) { return b.outages.size() >= 2; }));
  {
    const std::lock_guard lock{box->mutex};
    EXPECT_EQ(box->outages[0].device, "sensor");
    EXPECT_FALSE(box->outages[0].restored);
    EXPECT_FALSE(box->outages[0].reason.empty());
    EXPECT_TRUE(box->outages[1].restored);
    EXPECT_GT(box->outages[1].duration.count(), 0);
  }
  // Re-subscribed without being asked.
  emit_until_delivered(level_path, {2});
  ASSERT_TRUE(box->wait([](inbox& b) {
    return !b.frames.empty() && b.frames.back().second == std::string(1, char{2});
  }));
  const auto st = status(dev);
  EXPECT_EQ(st.state, link_state::ready);
  EXPECT_EQ(st.payload_size, 97u);  // re-read on the new link
  EXPECT_EQ(st.link.reconnects, 1u);
  EXPECT_EQ(st.link.disconnects, 1u);
  EXPECT_GE(st.link.retries, 1u);
  EXPECT_GE(st.link.errors, 2u);  // the two refused connects
  EXPECT_EQ(st.outages, 1u);
  EXPECT_EQ(stats(dev).reconnects, 1u);
}

// A read that reaches an incarnation between its failed connect and its end is answered with
// that failure (it used to be held by the core and its promise dropped with the actor, so the
// read waited out its 30 s request timeout while the next incarnation was long connected).
TEST_F(ble_device, a_first_connect_that_fails_is_restarted_by_the_supervisor) {
  mock("FailNextConnects", sdbus::ObjectPath{known_dev}, 2u, std::string{"Failed"});
  auto first = spawn(config(known_addr, "sensor"));
  ASSERT_TRUE(first);
  // The first two incarnations end with BlueZ's error; the third connects.
  caf::scoped_actor self{node_->system()};
  std::string value;
  caf::actor_addr answered_by;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (value.empty() && std::chrono::steady_clock::now() < deadline) {
    caf::actor current;
    self->request(node_->root(), 5s, actors::child_atom::value, std::string{"ble/sensor"})
        .receive([&](caf::actor& a) { current = a; }, [&](caf::error&) {});
    if (!current) {
      std::this_thread::sleep_for(10ms);
      continue;
    }
    auto r = call(caf::actor_cast<ble_device_actor>(current), "2a19", payload{}, caf::timespan{5s});
    if (r) {
      value = r.value();
      answered_by = current.address();
    } else {
      std::this_thread::sleep_for(10ms);
    }
  }
  ASSERT_EQ(value, std::string(1, char{87}));
  EXPECT_NE(answered_by, first.address()) << "the first incarnation cannot have connected";
}

TEST_F(ble_device, a_request_held_when_the_actor_is_stopped_is_answered) {
  // A device BlueZ does not know: the actor looks for it (discovery, 20 s) and holds requests.
  make_node();
  auto c = config("C0:FF:EE:00:00:99", "absent");
  c.peripheral.discovery_timeout = 20s;
  auto dev = spawn_ble_device(node_->system(), node_->reactor(), node_->pool(), c);
  caf::scoped_actor self{node_->system()};
  auto held = self->request(dev, 30s, actors::call_atom::value, std::string{"2a19"}, payload{},
                            caf::timespan{25s});
  // From the same sender, in order: the status is answered after the read reached the core.
  ble_device_status st;
  self->request(dev, 10s, actors::status_atom::value)
      .receive([&](ble_device_status& s) { st = s; },
               [&](caf::error& e) { ADD_FAILURE() << actors::describe(e); });
  EXPECT_EQ(st.state, link_state::discovering);
  self->send_exit(dev, caf::exit_reason::user_shutdown);
  // Answered at once with a typed error, not left to its 30 s request timeout.
  std::error_code ec;
  held.receive([&](payload&) { ADD_FAILURE() << "a value from a device never found"; },
               [&](caf::error& e) { ec = actors::from_caf_error(e); });
  EXPECT_EQ(ec, make_error_code(errc::closed)) << ec.message();
}

/// A vessel frame as a board would send it.
std::vector<std::uint8_t> board_frame(std::uint16_t kind, std::uint64_t request_id,
                                      std::string_view text) {
  wire::frame_header h;
  const auto p = std::as_bytes(std::span<const char>{text.data(), text.size()});
  h.payload_len = static_cast<std::uint32_t>(p.size());
  h.crc32c = wire::crc32c(p);
  h.body = wire::device_fields{9, kind, request_id};
  std::vector<std::byte> out;
  wire::frame_encoder enc;
  EXPECT_TRUE(enc.encode_to(h, p, out));
  const auto* u = reinterpret_cast<const std::uint8_t*>(out.data());
  return {u, u + out.size()};
}

TEST_F(ble_device, vessel_frames_travel_both_ways_through_the_actor) {
  // The emulated NUS board echoes RX to TX: a frame call comes back as its own reply (same
  // request id), a one-way frame comes back unsolicited.
  mock("SetMtu", std::uint16_t{23});  // every frame spans several notifications
  auto c = config(nus_addr, "board");
  c.frames = ble_frame_mode::vessel;
  c.device_id = 9;
  auto dev = spawn(c);
  ASSERT_TRUE(dev);
  auto box = std::make_shared<inbox>();
  listen(dev, box);

  for (int i = 0; i < 20; ++i) {
    const auto text = "request " + std::to_string(i) + " with a payload longer than one packet";
    auto r = call(dev, ble_frame_command, bytes(text));
    ASSERT_TRUE(r) << last_error_;
    EXPECT_EQ(r.value(), text);
  }
  ASSERT_TRUE(send(dev, ble_frame_command, bytes("one way")));
  ASSERT_TRUE(box->wait([](inbox& b) { return !b.frames.empty(); }));
  {
    const std::lock_guard lock{box->mutex};
    EXPECT_EQ(box->frames[0].first, "board");
    EXPECT_EQ(box->frames[0].second, "one way");
  }
  // A frame the board sends on its own, cut into notifications as the board's stack would.
  const auto tx = std::string{nus_dev} + "/service000a/char000d";
  const auto f = board_frame(ble_frame_kind_send, 0, "unsolicited from the board");
  for (std::size_t at = 0; at < f.size(); at += 20) {
    const std::vector<std::uint8_t> chunk(f.begin() + static_cast<std::ptrdiff_t>(at),
                                          f.begin() + static_cast<std::ptrdiff_t>(
                                                          std::min(f.size(), at + 20)));
    mock("EmitNotification", sdbus::ObjectPath{tx}, chunk);
  }
  ASSERT_TRUE(box->wait([](inbox& b) { return b.frames.size() >= 2; }));
  {
    const std::lock_guard lock{box->mutex};
    EXPECT_EQ(box->frames[1].second, "unsolicited from the board");
  }
  const auto st = status(dev);
  EXPECT_EQ(st.frames_out, 21u);
  EXPECT_EQ(st.frames_in, 22u);
  EXPECT_EQ(st.frame_errors, 0u);
  EXPECT_EQ(st.payload_size, 20u);
}

TEST_F(ble_device, a_frame_call_whose_link_drops_fails_typed_and_the_stream_recovers) {
  auto c = config(nus_addr, "board");
  c.frames = ble_frame_mode::vessel;
  auto dev = spawn(c);
  ASSERT_TRUE(dev);
  ASSERT_TRUE(call(dev, ble_frame_command, bytes("warm up"))) << last_error_;
  auto box = std::make_shared<inbox>();
  listen(dev, box);

  // The board stops echoing (its RX loses everything), so the next call waits for a reply when
  // the link goes: it fails with link_lost rather than waiting for its timeout.
  const auto rx = std::string{nus_dev} + "/service000a/char000b";
  mock("DropWrites", sdbus::ObjectPath{rx}, 1u);
  auto lost = std::async(std::launch::async, [&] {
    return call(dev, ble_frame_command, bytes("lost with the link"), caf::timespan{25s});
  });
  // Wait until the frame is written (the emulation logs RX writes), then cut the link.
  bool written_out = false;
  for (int i = 0; i < 2000 && !written_out; ++i) {
    for (const auto& w : written(rx))
      if (std::string(w.begin(), w.end()).find("lost with the link") != std::string::npos)
        written_out = true;
    if (!written_out) std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(written_out);
  mock("DropWrites", sdbus::ObjectPath{rx}, 0u);
  mock("DropConnection", sdbus::ObjectPath{nus_dev});
  const auto r = lost.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(errc::link_lost));
  ASSERT_TRUE(box->wait([](inbox& b) { return b.outages.size() >= 2; }));

  // After the reconnect the stream is in sync again: the next call is answered.
  auto again = call(dev, ble_frame_command, bytes("after the outage"));
  ASSERT_TRUE(again) << last_error_;
  EXPECT_EQ(again.value(), "after the outage");
  const auto st = status(dev);
  EXPECT_EQ(st.calls_failed_by_outage, 1u);
  EXPECT_EQ(st.link.reconnects, 1u);
}

}  // namespace
}  // namespace vessel::bridges::ble::testing
