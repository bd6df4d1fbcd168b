#include "collectives/collective_actor.hpp"

#include <unordered_map>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actor_errc.hpp"
#include "collectives/errc.hpp"

namespace vessel::collectives {

namespace {

// Shared with the functor that answers them when the incarnation ends (the state is gone by
// then).
using pending_map =
    std::unordered_map<std::uint64_t, caf::typed_response_promise<collective_result>>;

struct collective_state {
  std::shared_ptr<collective_driver> driver;
  std::shared_ptr<pending_map> pending;
  std::uint64_t next_id = 1;
  collective_actor_stats stats;
  static inline const char* name = "vessel.collective_actor";
};

using self_ptr = collective_impl_actor::stateful_pointer<collective_state>;

collective_impl_actor::behavior_type collective_impl(self_ptr self,
                                                     std::shared_ptr<collective_driver> driver) {
  actors::keep_exception_text(self);
  actors::register_caf_error_category(collectives_category());
  self->state.driver = std::move(driver);
  self->state.pending = std::make_shared<pending_map>();
  self->attach_functor([pending = self->state.pending](const caf::error& reason) {
    for (auto& [id, promise] : *pending) {
      promise.deliver(actors::to_caf_error(actors::actor_errc::node_stopped,
                                           "the collective actor ended (" +
                                               actors::describe(reason) +
                                               ") before its collective completed"));
    }
    pending->clear();
  });
  return {
      [self](coll_atom, collective_call& call) -> caf::result<collective_result> {
        auto& st = self->state;
        ++st.stats.requests;
        const std::uint64_t id = st.next_id++;
        auto promise = self->make_response_promise<collective_result>();
        st.pending->emplace(id, promise);
        // A weak handle: a job outliving this incarnation (restarted meanwhile) is dropped here,
        // its promise having been answered by the functor above.
        caf::actor_addr me = self->address();
        st.driver->submit(std::move(call), [me, id](collective_outcome o) {
          if (auto a = caf::actor_cast<caf::actor>(me)) {
            caf::anon_send(a, coll_done_atom::value, id, std::move(o));
          }
        });
        return promise;
      },
      [self](coll_done_atom, std::uint64_t id, collective_outcome& o) {
        auto& st = self->state;
        auto it = st.pending->find(id);
        if (it == st.pending->end()) return;
        if (o.error) {
          ++st.stats.errors;
          it->second.deliver(actors::to_caf_error(o.error, std::move(o.detail)));
        } else {
          ++st.stats.answered;
          it->second.deliver(collective_result{std::move(o.output)});
        }
        st.pending->erase(it);
      },
      [self](actors::stats_atom) {
        collective_actor_stats s = self->state.stats;
        s.pending = self->state.pending->size();
        s.driver = self->state.driver->stats();
        return s;
      },
  };
}

}  // namespace

collective_actor spawn_collective_actor(caf::actor_system& sys,
                                        std::shared_ptr<collective_driver> driver) {
  return caf::actor_cast<collective_actor>(sys.spawn(collective_impl, std::move(driver)));
}

actors::child_spec collective_actor_child(std::string name,
                                          std::shared_ptr<collective_driver> driver) {
  return actors::child_spec{
      std::move(name),
      [driver](caf::actor_system& sys) {
        return caf::actor_cast<caf::actor>(spawn_collective_actor(sys, driver));
      },
      actors::restart_mode::permanent};
}

}  // namespace vessel::collectives
