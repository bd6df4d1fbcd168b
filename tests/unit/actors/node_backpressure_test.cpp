// The node's bounds: the outbox (CAF -> reactor) holds a bounded number of sends per destination
// and calls back once there is room; the rank actor delays its `sent` reply while the outbox is
// full and answers actor_errc::send_pushed_back past its parking limit; its receives go through
// actors::message_matcher (MPI rules, reserved tags, the unexpected queue's bound withholding
// credit until a receive takes the message).

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <gtest/gtest.h>

#include "actors/actor_errc.hpp"
#include "actors/comm_errc.hpp"
#include "actors/errc.hpp"
#include "actors/link_credit.hpp"
#include "actors/node.hpp"
#include "actors/outbox.hpp"
#include "tests/unit/actors/caf_test_support.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;

// A world-of-one transport with a gate: closed, every send is pushed back (link_would_block);
// open, messages come back to rank 0 on a later reactor turn. Releases are counted.
class gated_transport final : public node_transport {
 public:
  gated_transport(io::reactor& r, mesh_observer& o) : reactor_{r}, observer_{o} {}
  result<void> send(std::uint32_t, std::uint64_t tag, io::buffer_slice payload) override {
    if (!open) return errc::link_would_block;
    accepted.fetch_add(1);
    tags.push_back(tag);
    queue_.push_back(inbound_message{0, tag, ++next_id_, std::move(payload)});
    if (!posted_) {
      posted_ = true;
      reactor_.post([this] {
        posted_ = false;
        auto batch = std::move(queue_);
        queue_.clear();
        for (auto& m : batch) observer_.on_message(std::move(m));
      });
    }
    return outcome::success();
  }
  void release(std::uint32_t, std::size_t bytes) override { released.fetch_add(bytes); }

  // Reactor thread.
  void open_gate() {
    open = true;
    observer_.on_writable(0);
  }

  bool open = false;                // reactor thread
  std::vector<std::uint64_t> tags;  // reactor thread: of the accepted sends, in order
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> released{0};

 private:
  io::reactor& reactor_;
  mesh_observer& observer_;
  std::deque<inbound_message> queue_;
  std::uint64_t next_id_ = 0;
  bool posted_ = false;
};

template <class F>
void on_reactor(io::reactor& r, F fn) {
  std::promise<void> done;
  ASSERT_TRUE(r.post([&] {
    fn();
    done.set_value();
  }));
  done.get_future().wait();
}

template <class Pred>
bool eventually(Pred p, std::chrono::seconds limit = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!p()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

node_config gated_config() {
  node_config cfg;
  cfg.pool.classes = {io::size_class_config{4096, 512}};
  cfg.pool.populate = false;
  cfg.outbox.max_queued_messages = 4;
  cfg.outbox.max_queued_bytes = 1 << 20;
  cfg.max_waiting_sends = 2;
  cfg.matching.max_unexpected_messages = 4;
  cfg.matching.max_unexpected_bytes = 1 << 20;
  cfg.matching.resume_fraction = 0.5;
  cfg.matching.initial_nodes = 16;
  return cfg;
}

std::unique_ptr<vessel::node> gated_node(node_config cfg, gated_transport*& out) {
  return std::make_unique<vessel::node>(cfg, [&out](io::reactor& r, mesh_observer& o) {
    auto t = std::make_unique<gated_transport>(r, o);
    out = t.get();
    return t;
  });
}

payload text(vessel::node& n, std::string_view s) { return payload::copy_of(n.pool(), s).value(); }

rank_stats stats_of(caf::scoped_actor& self, const rank_actor& rank) {
  rank_stats out;
  self->request(rank, caf::infinite, stats_atom::value)
      .receive([&](rank_stats& s) { out = s; }, [](caf::error& e) { ADD_FAILURE() << describe(e); });
  return out;
}

// An outbox over a gated transport on a reactor of its own; nothing is observed.
struct outbox_rig {
  struct never_observer final : mesh_observer {
    void on_message(inbound_message&&) override {}
    void on_peer_state(std::uint32_t, peer_state, std::error_code) override {}
    void on_writable(std::uint32_t) override {}
  };
  outbox_rig() { EXPECT_TRUE(reactor.start()); }
  ~outbox_rig() { reactor.stop(); }

  io::reactor reactor;
  never_observer observer;
  gated_transport transport{reactor, observer};
  io::buffer_pool pool{io::buffer_pool_config{{{4096, 64}}, false}};
  outbox out{reactor, outbox_config{2, 1 << 20, 4}};

  io::buffer_slice hundred_bytes() {
    auto block = pool.try_acquire(100);
    EXPECT_TRUE(block);
    return std::move(block).slice(0, 100);
  }
};

TEST(node_backpressure_test, the_outbox_counts_what_the_transport_has_not_taken_and_calls_back) {
  outbox_rig rig;
  auto& [reactor, observer, transport, pool, out] = rig;
  std::atomic<int> room_calls{0};
  out.set_room_callback([&](std::uint32_t dst) {
    EXPECT_EQ(dst, 1u);
    room_calls.fetch_add(1);
  });
  on_reactor(reactor, [&] { out.set_transport(&transport); });

  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(out.has_room(1));
    auto block = pool.try_acquire(100);
    ASSERT_TRUE(block);
    ASSERT_TRUE(out.send(1, 7, std::move(block).slice(0, 100)));
  }
  EXPECT_FALSE(out.has_room(1));
  EXPECT_TRUE(out.has_room(0));  // bounds are per destination
  EXPECT_EQ(out.queued_messages(1), 4u);
  EXPECT_EQ(out.queued_bytes(1), 400u);
  EXPECT_FALSE(out.wait_for_room(1));
  // The transport pushes everything back: still counted, no callback.
  on_reactor(reactor, [] {});
  EXPECT_EQ(out.queued_messages(1), 4u);
  EXPECT_EQ(room_calls.load(), 0);

  on_reactor(reactor, [&] {
    transport.open = true;
    out.on_writable(1);
  });
  EXPECT_EQ(transport.accepted.load(), 4u);
  EXPECT_EQ(out.queued_messages(1), 0u);
  EXPECT_EQ(out.queued_bytes(1), 0u);
  EXPECT_EQ(room_calls.load(), 1);  // once per wait_for_room
  EXPECT_TRUE(out.has_room(1));
  EXPECT_TRUE(out.wait_for_room(1));  // room already: go on at once
  on_reactor(reactor, [&] {
    EXPECT_EQ(out.stats().sends, 4u);
    EXPECT_EQ(out.stats().pushed_back, 1u);
    EXPECT_EQ(out.stats().room_calls, 1u);
    out.set_transport(nullptr);
  });
  reactor.stop();
}

// From the reactor thread a send goes to the transport at once and is counted only while it has
// to wait; it still queues behind what other threads queued and what waits in the backlog.
TEST(node_backpressure_test, a_send_from_the_reactor_thread_is_counted_only_while_it_waits) {
  outbox_rig rig;
  auto& [reactor, observer, transport, pool, out] = rig;
  on_reactor(reactor, [&] {
    out.set_transport(&transport);
    ASSERT_TRUE(out.send(1, 1, rig.hundred_bytes()));  // the gate is closed: it waits, counted
    EXPECT_EQ(out.queued_messages(1), 1u);
    EXPECT_EQ(out.queued_bytes(1), 100u);
  });

  // Another thread's send, whose drain is still queued when the reactor thread sends again.
  std::promise<void> queued;
  std::promise<void> done;
  ASSERT_TRUE(reactor.post([&, go = queued.get_future().share()] {
    go.wait();
    EXPECT_TRUE(out.send(1, 3, rig.hundred_bytes()));
    done.set_value();
  }));
  ASSERT_TRUE(out.send(1, 2, rig.hundred_bytes()));
  queued.set_value();
  done.get_future().wait();
  EXPECT_EQ(out.queued_messages(1), 3u);

  on_reactor(reactor, [&] {
    transport.open = true;
    out.on_writable(1);
    EXPECT_EQ(transport.tags, (std::vector<std::uint64_t>{1, 2, 3}));
    EXPECT_EQ(out.queued_messages(1), 0u);
    EXPECT_EQ(out.queued_bytes(1), 0u);
    ASSERT_TRUE(out.send(1, 4, rig.hundred_bytes()));  // taken at once: never counted
    EXPECT_EQ(transport.tags.size(), 4u);
    EXPECT_EQ(out.queued_messages(1), 0u);
    EXPECT_EQ(out.stats().sends, 4u);
    EXPECT_EQ(out.stats().pushed_back, 1u);
    out.set_transport(nullptr);
  });
  reactor.stop();
}

// A send from the reactor thread itself (the rank actor is hosted there) goes to the transport at
// once; one from another thread whose drain is still queued when the transport is taken away
// (the node stopping) goes to it before it goes.
TEST(node_backpressure_test, accepted_sends_reach_the_transport_before_it_is_taken_away) {
  outbox_rig rig;
  auto& [reactor, observer, transport, pool, out] = rig;
  transport.open = true;
  on_reactor(reactor, [&] {
    out.set_transport(&transport);
    ASSERT_TRUE(out.send(1, 7, rig.hundred_bytes()));
    EXPECT_EQ(transport.accepted.load(), 1u);  // no drain to wait for
  });

  std::promise<void> queued;
  std::promise<void> done;
  ASSERT_TRUE(reactor.post([&, go = queued.get_future().share()] {
    go.wait();
    out.set_transport(nullptr);  // the drain the send below posted has not run yet
    done.set_value();
  }));
  ASSERT_TRUE(out.send(1, 8, rig.hundred_bytes()));
  queued.set_value();
  done.get_future().wait();
  EXPECT_EQ(transport.accepted.load(), 2u);
  EXPECT_EQ(out.queued_messages(1), 0u);
  on_reactor(reactor, [] {});  // the posted drain finds nothing left
  EXPECT_EQ(transport.accepted.load(), 2u);
  reactor.stop();
}

TEST(node_backpressure_test, the_rank_actor_delays_the_sent_reply_until_there_is_room) {
  gated_transport* transport = nullptr;
  auto n = gated_node(gated_config(), transport);
  ASSERT_NE(transport, nullptr);
  {
    caf::scoped_actor self{n->system()};
    rank_actor rank = n->rank_actor();
    ASSERT_TRUE(rank);
    // The outbox takes four; the fifth and sixth are parked, their replies wait; the seventh is
    // past max_waiting_sends.
    for (int i = 0; i < 4; ++i) {
      self->request(rank, caf::infinite, send_atom::value, std::uint32_t{0}, std::uint64_t{1},
                    text(*n, "m" + std::to_string(i)))
          .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    }
    auto fifth = self->request(rank, caf::infinite, send_atom::value, std::uint32_t{0},
                               std::uint64_t{1}, text(*n, "m4"));
    auto sixth = self->request(rank, caf::infinite, send_atom::value, std::uint32_t{0},
                               std::uint64_t{1}, text(*n, "m5"));
    self->request(rank, caf::infinite, send_atom::value, std::uint32_t{0}, std::uint64_t{1},
                  text(*n, "m6"))
        .receive([](sent_atom) { ADD_FAILURE() << "a send past the parking limit was taken"; },
                 [](caf::error& e) {
                   EXPECT_EQ(from_caf_error(e), make_error_code(actor_errc::send_pushed_back));
                   EXPECT_NE(describe(e).find("rank 0"), std::string::npos) << describe(e);
                 });
    // The actor handled both parked sends before this request (one sender: in order).
    auto s = stats_of(self, rank);
    EXPECT_EQ(s.sends, 4u);
    EXPECT_EQ(s.sends_waiting, 2u);
    EXPECT_EQ(s.sends_delayed, 2u);
    EXPECT_EQ(s.sends_pushed_back, 1u);
    EXPECT_EQ(transport->accepted.load(), 0u);

    // The link opens: the outbox drains, calls back, and the parked replies come.
    on_reactor(n->reactor(), [&] { transport->open_gate(); });
    fifth.receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    sixth.receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    // Everything arrives in send order (the sixth after the first five).
    for (int i = 0; i < 6; ++i) {
      self->request(rank, caf::infinite, recv_atom::value, std::uint32_t{0}, std::uint64_t{1},
                    caf::timespan{20s})
          .receive([&](envelope& e) { EXPECT_EQ(e.data.view(), "m" + std::to_string(i)); },
                   [](caf::error& e) { ADD_FAILURE() << describe(e); });
    }
    s = stats_of(self, rank);
    EXPECT_EQ(s.sends, 6u);
    EXPECT_EQ(s.sends_waiting, 0u);
    EXPECT_EQ(s.received, 6u);
  }
  n->stop();
}

TEST(node_backpressure_test, receives_follow_the_matcher_and_credit_waits_past_the_bound) {
  gated_transport* transport = nullptr;
  auto cfg = gated_config();
  cfg.outbox.max_queued_messages = 64;
  auto n = gated_node(cfg, transport);
  on_reactor(n->reactor(), [&] { transport->open_gate(); });
  {
    caf::scoped_actor self{n->system()};
    rank_actor rank = n->rank_actor();
    ASSERT_TRUE(rank);
    // Ten 100-byte messages and nobody receiving: the first four are under the bound (credit
    // back at once), the fifth passes it and from there credit is withheld.
    const std::string body(100, 'x');
    for (int i = 0; i < 10; ++i) {
      self->request(rank, caf::infinite, send_atom::value, std::uint32_t{0}, std::uint64_t{3},
                    text(*n, std::to_string(i) + body))
          .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    }
    ASSERT_TRUE(eventually([&] { return stats_of(self, rank).unexpected == 10; }));
    const std::size_t one = body.size() + 1;
    const std::uint64_t one_credit = message_credit(one);
    ASSERT_TRUE(eventually([&] { return transport->released.load() == 4 * one_credit; }));
    auto s = stats_of(self, rank);
    EXPECT_EQ(s.credit_withheld, 6u);
    EXPECT_EQ(s.unexpected_bytes, 10 * one);

    // A wildcard tag does not match vessel's reserved tags; the exact tag does.
    self->request(rank, caf::infinite, send_atom::value, std::uint32_t{0},
                  reserved_tag_base + 1, text(*n, "reserved"))
        .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    ASSERT_TRUE(eventually([&] { return stats_of(self, rank).unexpected == 11; }));
    self->request(rank, caf::infinite, recv_atom::value, std::uint32_t{0}, rank_any_tag,
                  caf::timespan{20s})
        .receive([](envelope& e) { EXPECT_EQ(e.tag, 3u); },
                 [](caf::error& e) { ADD_FAILURE() << describe(e); });
    self->request(rank, caf::infinite, recv_atom::value, rank_any_source, reserved_tag_base + 1,
                  caf::timespan::zero())
        .receive([](envelope& e) { EXPECT_EQ(e.data.view(), "reserved"); },
                 [](caf::error& e) { ADD_FAILURE() << describe(e); });
    // A source outside the world is an error, not a receive that never completes.
    self->request(rank, caf::infinite, recv_atom::value, std::uint32_t{5}, std::uint64_t{3},
                  caf::timespan{20s})
        .receive([](envelope&) { ADD_FAILURE() << "received from a rank that does not exist"; },
                 [](caf::error& e) {
                   EXPECT_EQ(from_caf_error(e), make_error_code(comm_errc::source_out_of_range));
                 });

    // Receiving the rest in order gives every withheld credit back.
    for (int i = 1; i < 10; ++i) {
      self->request(rank, caf::infinite, recv_atom::value, std::uint32_t{0}, std::uint64_t{3},
                    caf::timespan::zero())
          .receive([&](envelope& e) { EXPECT_EQ(e.data.view(), std::to_string(i) + body); },
                   [](caf::error& e) { ADD_FAILURE() << describe(e); });
    }
    EXPECT_TRUE(eventually(
        [&] { return transport->released.load() == 10 * one_credit + message_credit(8); }))
        << transport->released.load();
    s = stats_of(self, rank);
    EXPECT_EQ(s.unexpected, 0u);
    EXPECT_EQ(s.unexpected_bytes, 0u);
    EXPECT_EQ(s.received, 11u);
  }
  n->stop();
}

TEST(node_backpressure_test, a_restarted_rank_actor_gives_back_the_credit_it_held) {
  gated_transport* transport = nullptr;
  auto n = gated_node(gated_config(), transport);
  on_reactor(n->reactor(), [&] { transport->open_gate(); });
  {
    caf::scoped_actor self{n->system()};
    rank_actor rank = n->rank_actor();
    for (int i = 0; i < 8; ++i) {
      self->request(rank, caf::infinite, send_atom::value, std::uint32_t{0}, std::uint64_t{3},
                    text(*n, "0123456789"))
          .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    }
    ASSERT_TRUE(eventually([&] { return stats_of(self, rank).unexpected == 8; }));
    ASSERT_TRUE(  // four under the bound
        eventually([&] { return transport->released.load() == 4 * message_credit(10); }));
    self->send_exit(rank, caf::exit_reason::kill);
    EXPECT_TRUE(eventually([&] { return transport->released.load() == 8 * message_credit(10); }))
        << transport->released.load();
  }
  n->stop();
}

}  // namespace
}  // namespace vessel::actors
