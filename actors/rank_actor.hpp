#pragma once
// The rank actor: implements rank_actor (actor_interfaces.hpp) over a node's outbox (sends and
// credit releases go to the reactor in batches) and the node's batched inbound messages.
//
// Receives are matched by actors::message_matcher, the one implementation of MPI's rules in
// vessel (the runtime uses it too): by source or any, by tag or any; the oldest matching message
// first, so messages of one (source, tag) never overtake each other. Its unexpected queue is
// bounded: past the bound a message's credit is withheld until a receive takes it, so a rank
// that does not receive slows its senders instead of growing without bound.
//
// Sends: while the outbox has room for the destination the reply comes at once; otherwise the
// send is parked here and its reply waits until the outbox drained (outbox's room callback). Past
// max_waiting_sends parked sends for one destination the reply is actor_errc::send_pushed_back.

#include <cstdint>
#include <memory>
#include <optional>

#include <caf/actor_control_block.hpp>
#include <caf/expected.hpp>
#include <caf/typed_actor.hpp>
#include <caf/weak_intrusive_ptr.hpp>

#include "actors/actor_interfaces.hpp"
#include "actors/event_batcher.hpp"
#include "actors/mesh.hpp"
#include "actors/message_matcher.hpp"
#include "actors/outbox.hpp"

namespace vessel::actors {

/// Internal: the earliest receive deadline is due (its time point, steady_clock ticks).
using recv_timeout_atom = caf::atom_constant<caf::atom("recvtmo")>;
/// Internal: the outbox has room for a destination again.
using room_atom = caf::atom_constant<caf::atom("room")>;

/// What the node's rank actor accepts: the public interface plus the reactor's batches.
using rank_impl_actor =
    rank_actor::extend<caf::reacts_to<event_batch<inbound_message>>,
                       caf::reacts_to<recv_timeout_atom, std::uint64_t>,
                       caf::reacts_to<room_atom, std::uint32_t>>;

struct rank_actor_config {
  std::uint32_t self_rank = 0;
  std::uint32_t world_size = 1;
  /// The unexpected queue's bounds (world_size is set from the above).
  matcher_config matching{};
  /// Per destination: sends parked (reply delayed) while the outbox is full; past this a send is
  /// answered with actor_errc::send_pushed_back.
  std::size_t max_waiting_sends = 4096;
};

class reactor_execution_unit;

/// Where a receive posted by a call (rank_direct_entry::try_receive with a waiter) completes:
/// the rank actor hands it the message, or the error, on the reactor thread, from its own run or
/// a direct take, never inside the call that posted the receive. The owner (the actor the waiter
/// lives in) is held alive for the call; a waiter whose owner has gone gets nothing, as a reply
/// to an actor that has gone reaches no one.
class receive_waiter {
 public:
  virtual void received(std::uint64_t token, caf::expected<envelope> result,
                        caf::strong_actor_ptr owner) = 0;

 protected:
  ~receive_waiter() = default;
};

/// A receive that may wait in the rank actor for its message, completed through `waiter`.
struct direct_wait {
  caf::timespan timeout{};  ///< as the receive request's; zero or less: take only what is here
  receive_waiter* waiter = nullptr;
  caf::weak_actor_ptr owner;
  std::uint64_t token = 0;  ///< handed back with the result
};

/// A rank actor resident on the reactor thread takes the reactor's batches as calls. A batch
/// sent as a message costs the reactor a mailbox element, a posted resumption and a behaviour
/// dispatch (~450 ns here, a fifth of an 8-byte message through the actor API); taken directly
/// it is matched in the same turn. Only between the actor's runs, with no earlier batch still in
/// its mailbox, so that arrivals keep their order and the actor's state has one user at a time.
///
/// Sends, and receives of messages already here, from an actor resident on the same thread come
/// in the same way (rank_port.hpp): a request costs two mailbox hops (it and its reply) where a
/// call costs none.
class rank_direct_entry {
 public:
  /// Reactor thread. Takes `batch` (as the actor's batch handler would) and returns true; or
  /// returns false and expects the caller to send it as a message, which the actor then takes
  /// before any later batch.
  virtual bool take(event_batch<inbound_message>& batch) = 0;
  /// Reactor thread, from the transport's delivery itself: takes one arrival as a batch of one
  /// would be taken and returns true; or returns false and leaves `m` for the caller to batch.
  /// The caller takes this way only while no arrival of its own waits in a batch (order).
  virtual bool take_arrival(inbound_message& m) = 0;

  enum class send_outcome : std::uint8_t {
    sent,       ///< handed to the outbox: what the send handler's immediate reply says
    stopped,    ///< the node's reactor has stopped; the payload is dropped
    not_taken,  ///< `data` untouched: send it as a request
  };
  /// Reactor thread, from an actor resident there. Sends `data` as the send handler would when
  /// it can reply at once (destination in range, no send parked for it, room in the outbox);
  /// otherwise, or while the actor runs, leaves `data` alone. Earlier send requests of the same
  /// caller must have been answered, or this one would overtake them (rank_port sees to it).
  virtual send_outcome try_send(std::uint32_t dst, std::uint64_t tag, payload& data) = 0;

  enum class receive_outcome : std::uint8_t {
    taken,      ///< `got` holds the message: what the receive handler's immediate reply says
    waiting,    ///< posted as the handler posts a receive; `wait.waiter` gets its result
    not_taken,  ///< nothing done (`source` out of range, no time to wait, or the actor runs):
                ///< send the receive as a request
  };
  /// Reactor thread, from an actor resident there: a receive for (`source`, `tag`), as the
  /// receive handler would take it, without a message either way. The oldest matching message
  /// already here is taken now; otherwise, with time to wait, the receive is posted and waits
  /// (in order with every other receive posted, timed out as a request's is). Earlier receive
  /// requests of the same caller must have been answered (rank_port sees to it).
  virtual receive_outcome try_receive(std::uint32_t source, std::uint64_t tag, direct_wait& wait,
                                      std::optional<envelope>& got) = 0;

 protected:
  ~rank_direct_entry() = default;
};

/// The direct entry of a rank actor spawned with a host; null for one on CAF's workers. Valid
/// while a handle to the actor is held.
rank_direct_entry* direct_entry_of(const rank_impl_actor& rank) noexcept;
rank_direct_entry* direct_entry_of(const rank_actor& rank) noexcept;

/// Spawns a rank actor sending through `out` (shared with the node, which drains it). The node
/// routes out's room callback to the actor as (room_atom, dst). With `host`, the actor runs on
/// that unit's reactor thread (the one that drains `out`) instead of a CAF worker.
rank_impl_actor spawn_rank_actor(caf::actor_system& sys, rank_actor_config config,
                                 std::shared_ptr<outbox> out,
                                 reactor_execution_unit* host = nullptr);

}  // namespace vessel::actors
