// Two vessel::nodes in one process, each with its own reactor and a mesh (loopback TCP), meeting
// through a key-value store: messages between their rank actors, and the link actor of each
// seeing up -> reconnecting -> up around a dropped connection.

#include "actors/node.hpp"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <gtest/gtest.h>

#include "actors/actor_errc.hpp"
#include "actors/auth.hpp"
#include "actors/mesh.hpp"
#include "tests/unit/actors/caf_test_support.hpp"
#include "tests/unit/actors/mesh_test_support.hpp"

namespace vessel::actors {
namespace {

using namespace std::chrono_literals;
using testing::waitable_log;

cluster_token test_token() {
  std::vector<std::byte> bytes(32, std::byte{'n'});
  return std::move(cluster_token::from_bytes(bytes, "node test").value());
}

mesh_config mesh_for(std::uint32_t rank, const cluster_token& token) {
  mesh_config c;
  c.self_rank = rank;
  c.world_size = 2;
  c.incarnation = 500 + rank;
  c.token = &token;
  c.transport = mesh_transport::tcp;
  c.store_prefix = "node_mesh_test";
  c.pool.classes = {{4096, 256}, {64u << 10, 32}};
  c.pool.populate = false;
  c.liveness.heartbeat_interval = 200ms;
  c.liveness.peer_deadline = 10s;
  c.reconnect_deadline = 20000ms;
  return c;
}

node_config node_for(std::uint32_t rank) {
  node_config cfg;
  cfg.rank = rank;
  cfg.world_size = 2;
  cfg.pool.classes = {io::size_class_config{4096, 256}};
  cfg.pool.populate = false;
  return cfg;
}

// A node whose transport is a mesh it owns.
std::unique_ptr<vessel::node> make_node(std::uint32_t rank, const cluster_token& token,
                                        mesh*& out) {
  return std::make_unique<vessel::node>(
      node_for(rank), [&, rank](io::reactor& r, mesh_observer& o) {
        auto t = std::make_unique<mesh_node_transport<mesh>>(
            std::make_unique<mesh>(r, mesh_for(rank, token), o));
        out = &t->mesh();
        return t;
      });
}

caf::behavior listener(caf::event_based_actor*, std::shared_ptr<waitable_log<link_event>> log) {
  return {[log](const link_event& e) { log->push(e); }};
}

link_actor wait_for_link(vessel::node& n, std::uint32_t peer) {
  for (int i = 0; i < 5000; ++i) {
    if (auto l = n.link_actor(peer)) return l;
    std::this_thread::sleep_for(1ms);
  }
  return {};
}

TEST(node_mesh_test, two_nodes_exchange_messages_and_a_link_actor_sees_a_reconnect) {
  test::store_fixture store;
  const auto token = test_token();
  mesh* meshes[2] = {nullptr, nullptr};
  auto n0 = make_node(0, token, meshes[0]);
  auto n1 = make_node(1, token, meshes[1]);
  ASSERT_TRUE(meshes[0] && meshes[1]);

  // Listen to rank 1's link to rank 0 before anything connects.
  auto events = std::make_shared<waitable_log<link_event>>();
  auto link = wait_for_link(*n1, 0);
  ASSERT_TRUE(link);
  auto l = caf::actor_cast<link_listener>(n1->system().spawn(listener, events));
  {
    caf::scoped_actor self{n1->system()};
    self->send(link, listen_atom::value, l);
    self->request(link, caf::infinite, status_atom::value)
        .receive([](const link_status&) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
  }

  ASSERT_TRUE(test::connect_meshes(store, {meshes[0], meshes[1]}));

  {
    caf::scoped_actor self0{n0->system()};
    caf::scoped_actor self1{n1->system()};
    rank_actor r0 = n0->rank_actor();
    rank_actor r1 = n1->rank_actor();
    for (int i = 0; i < 50; ++i) {
      auto p = payload::copy_of(n0->pool(), "m" + std::to_string(i)).value();
      self0->request(r0, caf::infinite, send_atom::value, std::uint32_t{1}, std::uint64_t{3}, p)
          .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    }
    for (int i = 0; i < 50; ++i) {
      self1->request(r1, caf::infinite, recv_atom::value, std::uint32_t{0}, std::uint64_t{3},
                     caf::timespan{10s})
          .receive(
              [&](const envelope& e) {
                EXPECT_EQ(e.source, 0u);
                EXPECT_EQ(e.data.view(), "m" + std::to_string(i));
              },
              [](caf::error& e) { ADD_FAILURE() << describe(e); });
    }

    // Cut the connection: rank 1 (the dialler) goes reconnecting, then up again, and messages
    // sent meanwhile still arrive.
    ASSERT_TRUE(events->wait_until([](const auto& es) {
      for (const auto& e : es) {
        if (e.state == peer_state::up) return true;
      }
      return false;
    }));
    n1->drop_connection(0);
    auto p = payload::copy_of(n0->pool(), std::string_view{"after drop"}).value();
    self0->request(r0, caf::infinite, send_atom::value, std::uint32_t{1}, std::uint64_t{4}, p)
        .receive([](sent_atom) {}, [](caf::error& e) { ADD_FAILURE() << describe(e); });
    self1->request(r1, caf::infinite, recv_atom::value, rank_any_source, rank_any_tag,
                   caf::timespan{20s})
        .receive([](const envelope& e) { EXPECT_EQ(e.data.view(), "after drop"); },
                 [](caf::error& e) { ADD_FAILURE() << describe(e); });
    ASSERT_TRUE(events->wait_until([](const auto& es) {
      bool reconnecting = false;
      for (const auto& e : es) {
        if (e.state == peer_state::reconnecting) reconnecting = true;
        if (reconnecting && e.state == peer_state::up) return true;
      }
      return false;
    }, 20s));
    self1->request(link, caf::infinite, status_atom::value)
        .receive(
            [](const link_status& s) {
              EXPECT_EQ(s.state, peer_state::up);
              EXPECT_GE(s.reconnects, 1u);
              EXPECT_GE(s.ups, 2u);
            },
            [](caf::error& e) { ADD_FAILURE() << describe(e); });
    self1->send_exit(l, caf::exit_reason::user_shutdown);
  }
  n1->stop();
  n0->stop();
  EXPECT_FALSE(n0->failed());
  EXPECT_FALSE(n1->failed());
}

}  // namespace
}  // namespace vessel::actors
