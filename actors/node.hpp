#pragma once
// vessel::node: one rank process's CAF side. It owns the caf::actor_system (a small scheduler:
// caf.scheduler.max-threads defaults to 2, because on small machines every extra worker thread
// is one more hand-off; DESIGN.md "Where the time goes"), the reactor thread, the transport it
// drives (the mesh, or a loopback for a world of one) and the root supervisor. The root
// supervises the rank actor, one link actor per peer (each under its own supervisor "peer/<n>",
// so that a peer that keeps failing is given up alone and reported lost), and whatever device
// and app actors the app adds.
//
// Data path: transport (reactor thread) -> node observer -> event_batcher (one anon_send per
// reactor turn) -> rank / link actors; rank actor -> outbox (one reactor wake-up per burst) ->
// transport. The rank actor itself runs on the reactor thread (rank_actor_on_reactor), so that
// both of its hand-offs stay on that thread; the link actors, off the data path, run on CAF's.
//
// Shutdown (stop() or the destructor): the root stops its children in reverse order, then the
// reactor stops, then the actor system goes. Nothing may be left running, or CAF's destructor
// would wait forever.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/fwd.hpp>

#include "actors/actor_interfaces.hpp"
#include "actors/caller_progress.hpp"
#include "actors/detailed_error.hpp"
#include "actors/env.hpp"
#include "actors/event_batcher.hpp"
#include "actors/mesh.hpp"
#include "actors/message_matcher.hpp"
#include "actors/node_transport.hpp"
#include "actors/outbox.hpp"
#include "actors/pool_room.hpp"
#include "actors/reactor_hosted.hpp"
#include "actors/supervisor.hpp"
#include "io/buffer_pool.hpp"
#include "io/reactor.hpp"

namespace vessel::actors {
class rank_direct_entry;
}  // namespace vessel::actors

namespace vessel {

/// How CAF's workers find the actors that have mail (caf.scheduler.policy).
enum class caf_scheduler {
  /// One shared queue; an idle worker sleeps on a condition variable and is woken by the next
  /// enqueue. Every hop from the reactor or the app to an actor costs one wake-up.
  sharing,
  /// CAF's default: per-worker queues; an idle worker polls, then sleeps between polls (50 us,
  /// later 10 ms), so a message to an idle system waits out part of a sleep.
  stealing,
};

/// Every key of a node with its default.
struct node_config {
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  /// CAF worker threads (caf.scheduler.max-threads); VESSEL_CAF_THREADS.
  std::size_t scheduler_threads = 2;
  /// CAF's scheduling policy; VESSEL_CAF_SCHEDULER (`sharing` or `stealing`).
  caf_scheduler scheduler = caf_scheduler::sharing;
  /// The rank actor runs on the reactor thread, where its batches are made and its sends drained
  /// (actors/reactor_hosted.hpp), rather than on a CAF worker, a thread crossing each way;
  /// VESSEL_RANK_ACTOR_THREAD (`reactor` or `caf`).
  bool rank_actor_on_reactor = true;
  /// The root supervisor and the per-peer supervisors (restart backoff, limits).
  actors::supervisor_config supervision{};
  /// How often a peer's link actor may fail within the window before the peer is given up.
  std::uint32_t peer_max_restarts = 5;
  actors::event_batcher_config batching{};
  /// The rank actor's unexpected queue (world_size is set from the above). Its bytes are blocks
  /// of the transport's receive pool: keep the bound below what that pool holds.
  actors::matcher_config matching = default_matching();
  /// Per destination, sends not yet accepted by the link (the rank actor's replies wait past it).
  actors::outbox_config outbox{};
  /// Per destination, sends whose reply waits, before actor_errc::send_pushed_back.
  std::size_t max_waiting_sends = 4096;
  /// The reactor; `lendable` is set from caller_progress.
  io::reactor_config reactor{};
  /// Threads outside the actor system that wait on the node (actors::driving_scoped_actor) run
  /// its reactor loop themselves while they wait, as vessel::comm's waiters do: the rank actor's
  /// reply then needs no thread hand-off. VESSEL_PROGRESS (`caller` or `thread`),
  /// VESSEL_PROGRESS_SPIN_US, VESSEL_YIELD_WHEN_IDLE.
  actors::caller_progress_config caller_progress{};
  /// The pool for payloads apps send (and the loopback's messages).
  io::buffer_pool_config pool = io::buffer_pool_config::defaults();

  /// Reads VESSEL_CAF_THREADS, VESSEL_CAF_SCHEDULER, VESSEL_RANK_ACTOR_THREAD, VESSEL_PROGRESS,
  /// VESSEL_PROGRESS_SPIN_US and VESSEL_YIELD_WHEN_IDLE; a malformed value is an error naming it.
  actors::detailed_result<void> apply_env(const actors::env_view& env);

  /// 16 MiB or 1024 messages unexpected.
  static actors::matcher_config default_matching() {
    actors::matcher_config m;
    m.max_unexpected_bytes = std::size_t{16} << 20;
    m.max_unexpected_messages = 1024;
    m.initial_nodes = 256;
    return m;
  }
};

/// Called on the reactor thread once the node is ready to build its transport: the node is the
/// observer every delivery must go to. Return the transport (e.g. a mesh_node_transport over a mesh
/// built with `observer`), or nullptr to fail the node's start.
using transport_factory = std::function<std::unique_ptr<actors::node_transport>(
    io::reactor&, actors::mesh_observer& observer)>;

class node {
 public:
  /// Starts the actor system, the reactor and the supervision tree. Without a factory the world
  /// must be of size 1 (loopback). Throws std::system_error when the reactor cannot start.
  explicit node(node_config config = {}, transport_factory make_transport = {});
  ~node();
  node(const node&) = delete;
  node& operator=(const node&) = delete;

  std::uint32_t rank() const noexcept { return config_.rank; }
  std::uint32_t world_size() const noexcept { return config_.world_size; }
  caf::actor_system& system() noexcept { return *system_; }
  io::reactor& reactor() noexcept { return reactor_; }
  /// Blocks for payloads (any thread).
  io::buffer_pool& pool() noexcept { return *pool_; }
  /// Any thread. For an actor that found pool() empty: `who` gets an actors::pool_room_atom once
  /// a block of `bytes` may be free again, instead of polling on a timer (actors/pool_room.hpp).
  /// False when no class of the pool holds `bytes`.
  bool notify_when_pool_has_room(std::size_t bytes, caf::actor who) {
    return pool_room_->notify_when_free(bytes, std::move(who));
  }
  /// For blocking code (a blocking or scoped actor): payload::copy_of(pool(), bytes), waiting
  /// while the pool is empty for `self` to hear that a block is back, up to `timeout` (finite).
  /// io::errc::pool_exhausted once it passed; std::errc::message_size when no class holds `bytes`.
  result<actors::payload> copy_when_pool_has_room(caf::blocking_actor* self,
                                                  std::span<const std::byte> bytes,
                                                  caf::timespan timeout);

  /// The rank actor now (a supervisor may replace it: ask again after a failure); invalid while
  /// it is being restarted.
  actors::rank_actor rank_actor() const;
  /// The link actor of `peer` now (invalid for self, a peer out of range, or one being restarted).
  actors::link_actor link_actor(std::uint32_t peer) const;
  /// The rank actor's host, for app actors that should run beside it on the reactor thread
  /// (derive from actors::on_reactor_thread<caf::event_based_actor>, spawn with this as the first
  /// argument): their requests to the rank actor cross no thread. Their handlers run on the loop
  /// that serves every link, so they must neither block nor compute for long. Null when
  /// rank_actor_on_reactor is off.
  actors::reactor_execution_unit* reactor_host() noexcept { return rank_host_.get(); }

  /// Caller-driven waits (actors::driving_scoped_actor): the configuration, and whether a waiter
  /// yields between turns now (any thread; set_waiters_yield once the host's ranks are known).
  const actors::caller_progress_config& caller_progress() const noexcept {
    return config_.caller_progress;
  }
  bool waiters_yield() const noexcept { return waiters_yield_.load(std::memory_order_relaxed); }
  void set_waiters_yield(bool on) noexcept { waiters_yield_.store(on, std::memory_order_relaxed); }
  /// The root supervisor (send it start_child_atom / child_atom directly if you like).
  const caf::actor& root() const noexcept { return root_; }

  /// Adds a device or app actor under the root supervisor; blocks until it runs. Errors from the
  /// supervisor (stopping) come back as the caf::error's description.
  actors::detailed_result<caf::actor> spawn_supervised(actors::child_spec spec);

  /// Peers given up for good (their link supervisor escalated).
  std::set<std::uint32_t> lost_peers() const;
  /// True after the root supervisor itself failed (a child escalated to it).
  bool failed() const;

  /// Fault injection (tests): the transport cuts its connection to `peer` (any thread).
  void drop_connection(std::uint32_t peer);

  /// Any thread but the reactor's or a CAF worker's: orderly shutdown (idempotent).
  void stop();

 private:
  class observer;
  struct actor_slot {  // the current incarnation of a supervised actor, read by the batchers
    mutable std::mutex mutex;
    std::condition_variable changed;
    caf::actor current;
  };
  struct rank_slot : actor_slot {
    /// The only way current and direct change: together, and with the generation moved.
    void set(caf::actor actor, actors::rank_direct_entry* entry) {
      const std::lock_guard lock{mutex};
      current = std::move(actor);
      direct = entry;
      generation.fetch_add(1, std::memory_order_release);
    }
    actors::rank_direct_entry* direct = nullptr;  // current's, when it lives on the reactor
    // Moved (under the mutex) whenever current changes: the reactor thread keeps its own copy
    // of the slot and reads this one only when the number moved (node::observer).
    std::atomic<std::uint64_t> generation{0};
  };

  void on_root_event(const actors::supervisor_event& e);

  node_config config_;
  std::unique_ptr<io::buffer_pool> pool_;
  caf::actor_system_config caf_config_;
  std::unique_ptr<caf::actor_system> system_;
  std::unique_ptr<actors::pool_room> pool_room_;  // holds actor handles: gone before system_
  // Null: the rank actor runs on CAF's workers. Declared before the reactor, which may run a last
  // posted resumption as it is destroyed.
  std::unique_ptr<actors::reactor_execution_unit> rank_host_;
  io::reactor reactor_;
  std::shared_ptr<actors::outbox> outbox_;
  std::unique_ptr<observer> observer_;
  std::unique_ptr<actors::node_transport> transport_;
  bool transport_open_ = false;  // reactor thread: transport_ may be used
  rank_slot rank_slot_;
  std::vector<std::unique_ptr<actor_slot>> link_slots_;  // by peer
  std::unique_ptr<actors::event_batcher<actors::inbound_message>> rank_batcher_;
  std::vector<std::unique_ptr<actors::event_batcher<actors::link_event>>> link_batchers_;
  caf::actor root_;
  mutable std::mutex state_mutex_;
  std::set<std::uint32_t> lost_peers_;
  bool failed_ = false;
  bool stopped_ = false;
  std::atomic<bool> waiters_yield_{false};
};

}  // namespace vessel
