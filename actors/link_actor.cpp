#include "actors/link_actor.hpp"

#include <algorithm>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/supervisor.hpp"
#include "io/log.hpp"

namespace vessel::actors {
namespace {

struct link_state {
  link_status status;
  std::vector<link_listener> listeners;
  link_down_handler on_down;
  static inline const char* name = "vessel.link";
};

using self_ptr = link_impl_actor::stateful_pointer<link_state>;

void apply(self_ptr self, const link_event& e) {
  auto& s = self->state.status;
  s.state = e.state;
  switch (e.state) {
    case peer_state::connecting: break;
    case peer_state::up: ++s.ups; break;
    case peer_state::reconnecting: ++s.reconnects; break;
    case peer_state::restarted: ++s.restarts; break;
    case peer_state::down: ++s.downs; break;
  }
  if (e.why) s.last_reason = e.why;
  for (const auto& l : self->state.listeners) self->send(l, e);
  if (e.state == peer_state::down) {
    log::get("actors").warn("link to rank {} is down: {}", e.peer,
                            e.why ? e.why.message() : std::string{"no reason given"});
    if (self->state.on_down) self->state.on_down(e.peer, e.why);
  }
}

link_impl_actor::behavior_type link_impl(self_ptr self, std::uint32_t peer,
                                         link_down_handler on_down) {
  keep_exception_text(self);
  self->state.status.peer = peer;
  self->state.on_down = std::move(on_down);
  return {
      [self](status_atom) { return self->state.status; },
      [self](listen_atom, link_listener& l) {
        auto& ls = self->state.listeners;
        if (std::find(ls.begin(), ls.end(), l) == ls.end()) ls.push_back(std::move(l));
      },
      [self](unlisten_atom, const link_listener& l) {
        auto& ls = self->state.listeners;
        ls.erase(std::remove(ls.begin(), ls.end(), l), ls.end());
      },
      [self](const event_batch<link_event>& batch) {
        for (const auto& e : batch.events()) apply(self, e);
      },
  };
}

}  // namespace

link_impl_actor spawn_link_actor(caf::actor_system& sys, std::uint32_t peer,
                                 link_down_handler on_down) {
  return sys.spawn(link_impl, peer, std::move(on_down));
}

}  // namespace vessel::actors
