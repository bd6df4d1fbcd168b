#pragma once
// A vessel::node for a real rank process: bootstrap from the environment (VESSEL_*, Open MPI,
// PMI, Slurm, torchrun; the source is logged), the cluster token, the rendezvous store (rank 0
// serves it; under mpirun without VESSEL_STORE it publishes the address in a file, as the
// runtime does), then a node whose transport is a mesh connected to every peer. What an actor app
// calls first:
//
//   auto launched = vessel::launched_node::start();   // throws nothing; errors name the cause
//   if (!launched) { std::cerr << launched.error().detail; return 1; }
//   vessel::node& n = launched.value()->node();        // every peer link is up
//
// The mesh re-dials a dropped connection with backoff and resends what was lost (actors/mesh.hpp),
// so under the actor API a dropped connection is a delay; the link actor reports
// up -> reconnecting -> up.

#include <chrono>
#include <memory>
#include <string>

#include "actors/bootstrap.hpp"
#include "actors/cpu_binding.hpp"
#include "actors/detailed_error.hpp"
#include "actors/env.hpp"
#include "actors/mesh.hpp"
#include "actors/node.hpp"

namespace vessel {

namespace actors {
class cluster_token;
class kv_store_client;
class kv_store_server;
}  // namespace actors

/// How a launched node starts. Every key with its default.
struct node_launch_options {
  /// The node; rank and world size are overwritten by the bootstrap.
  node_config node = default_node();
  /// The mesh, less what the bootstrap fills in (ranks, token, incarnation).
  actors::mesh_config mesh = default_mesh();
  /// Longest wait for the store and every peer link (VESSEL_CONNECT_TIMEOUT_MS).
  std::chrono::milliseconds connect_timeout{60000};
  /// Once the ranks on this host are known, binds the process to one core (VESSEL_BIND; as
  /// vessel::comm and mpirun do). The rank actor's path crosses four threads per message (app,
  /// CAF worker, reactor and back); on one core each crossing is a context switch, across cores
  /// a wake-up of an idle CPU: 8-byte latency through the rank actor 120-150 -> 70-76 us (2
  /// vCPUs, docs/io_performance.md). An app whose actors compute in parallel sets it to none.
  actors::cpu_binding bind = actors::cpu_binding::automatic;
  /// Once bound to a core of its own, the node's reactor polls this long for the next frame
  /// before it sleeps, yielding the core between checks to any thread of the process that wants
  /// it (VESSEL_PROGRESS_SPIN_US; reactor_config::busy_poll, yield_while_polling). The peer's
  /// frame then finds a running thread instead of a halted CPU to wake: 8-byte latency through
  /// the rank actor 67-70 -> 24-26 us. Nothing spins while unbound (the cores are shared).
  std::chrono::microseconds bound_reactor_spin{200};

  /// The same as a default-constructed value: payload and receive pools not pre-faulted, a 1 MiB
  /// largest block, and a receive pool that holds the rank actor's unexpected queue.
  static node_launch_options defaults();
  /// The node with its payload pool for a rank on a small shared machine.
  static node_config default_node();
  /// The mesh with a receive pool that holds the rank actor's unexpected queue (16 MiB, 1024
  /// messages: node_config::default_matching) plus a link window from each of 7 peers, for
  /// messages that fill their blocks (tests/unit/actors/node_launch_options_test.cpp). The mesh's
  /// own default pool (256 blocks of 64 KiB) does not: a 64 KiB stream to a rank actor that fell
  /// behind ran it dry, and the link reconnected to shed each message it had no block for
  /// (hosted actor, 64 KiB over shm: 0.9 GB/s with a reconnect every ~20 ms, 5.6-6.8 without).
  static actors::mesh_config default_mesh();
  /// VESSEL_CONNECT_TIMEOUT_MS, VESSEL_BIND, VESSEL_PROGRESS_SPIN_US, the node's
  /// (VESSEL_CAF_THREADS) and the mesh's variables.
  actors::detailed_result<void> apply_env(const actors::env_view& env);
};

/// One rank process's node, connected. Not movable (the node holds pointers into it).
class launched_node {
 public:
  static actors::detailed_result<std::unique_ptr<launched_node>> start(
      const actors::env_view& env = actors::env_view::process(),
      node_launch_options options = node_launch_options::defaults());
  ~launched_node();
  launched_node(const launched_node&) = delete;
  launched_node& operator=(const launched_node&) = delete;

  vessel::node& node() noexcept { return *node_; }
  const actors::launch_info& launch() const noexcept { return launch_; }
  /// The store client (apps may use the store too, e.g. for a final rendezvous).
  actors::kv_store_client& store() noexcept { return *store_client_; }
  /// The mesh under the node (counters); valid until stop().
  actors::mesh& mesh() noexcept { return *mesh_; }

  /// Returns once every rank called barrier(name) (through the store), or fails after `timeout`
  /// naming the ranks still missing. An app calls it before it exits, so that no rank closes its
  /// links while a peer still waits for its messages.
  actors::detailed_result<void> barrier(const std::string& name,
                                        std::chrono::milliseconds timeout = std::chrono::seconds{60});

  /// Stops the node (its links close), then the store: rank 0, which serves it, waits (up to
  /// 5 s) until every other rank said goodbye. Idempotent; the destructor calls it.
  void stop();

 private:
  launched_node() = default;
  actors::detailed_result<void> boot(const actors::env_view& env, node_launch_options options);

  actors::launch_info launch_;
  std::unique_ptr<actors::cluster_token> token_;
  std::unique_ptr<io::reactor> store_reactor_;  // the store's own thread (client and server)
  std::unique_ptr<actors::kv_store_server> store_server_;  // rank 0
  std::unique_ptr<actors::kv_store_client> store_client_;
  std::string store_file_;  // written by rank 0, removed at stop()
  actors::mesh* mesh_ = nullptr;  // owned by the node's transport
  std::unique_ptr<vessel::node> node_;
  bool stopped_ = false;
};

}  // namespace vessel
