#pragma once
// The link actor of one peer: implements link_actor (actor_interfaces.hpp). It sees the peer's
// state changes (batched from the reactor), keeps the counters, and pushes every change to its
// listeners; `down` carries the reason. The per-frame work of the link stays on the reactor
// (actors/peer_link); this actor is the link's place in the supervision tree.

#include <cstdint>
#include <memory>
#include <vector>

#include <caf/typed_actor.hpp>

#include "actors/actor_interfaces.hpp"
#include "actors/event_batcher.hpp"

namespace vessel::actors {

/// What the node's link actors accept: the public interface plus the reactor's batches.
using link_impl_actor = link_actor::extend<caf::reacts_to<event_batch<link_event>>>;

/// Called (on the link actor's thread) when the peer goes down: the node decides what follows.
using link_down_handler = std::function<void(std::uint32_t peer, std::error_code why)>;

link_impl_actor spawn_link_actor(caf::actor_system& sys, std::uint32_t peer,
                                 link_down_handler on_down = {});

}  // namespace vessel::actors
