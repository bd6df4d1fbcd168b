#pragma once
// The rank actor: implements rank_actor (actor_interfaces.hpp) over a node's outbox (sends and
// credit releases go to the reactor in batches) and the node's batched inbound messages.
// Receives follow MPI's matching rules: by source or any, by tag or any; the oldest matching
// message first, so messages of one (source, tag) never overtake each other. A message waits in
// the unexpected queue until a receive takes it, and its credit goes back to the sender only
// then: a rank that does not receive slows its senders instead of growing without bound.

#include <cstdint>
#include <memory>

#include <caf/typed_actor.hpp>

#include "actors/actor_interfaces.hpp"
#include "actors/event_batcher.hpp"
#include "actors/mesh.hpp"
#include "actors/outbox.hpp"

namespace vessel::actors {

/// Internal: a receive's deadline passed (receive id).
using recv_timeout_atom = caf::atom_constant<caf::atom("recvtmo")>;

/// What the node's rank actor accepts: the public interface plus the reactor's batches.
using rank_impl_actor =
    rank_actor::extend<caf::reacts_to<event_batch<inbound_message>>,
                       caf::reacts_to<recv_timeout_atom, std::uint64_t>>;

struct rank_actor_config {
  std::uint32_t self_rank = 0;
  std::uint32_t world_size = 1;
};

/// Spawns a rank actor sending through `out` (shared with the node, which drains it).
rank_impl_actor spawn_rank_actor(caf::actor_system& sys, rank_actor_config config,
                                 std::shared_ptr<outbox> out);

}  // namespace vessel::actors
