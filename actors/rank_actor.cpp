#include "actors/rank_actor.hpp"

#include <chrono>
#include <deque>
#include <string>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actor_errc.hpp"
#include "actors/errc.hpp"
#include "actors/supervisor.hpp"

namespace vessel::actors {
namespace {

struct pending_receive {
  std::uint64_t id = 0;
  std::uint32_t source = 0;
  std::uint64_t tag = 0;
  caf::typed_response_promise<envelope> promise;
};

bool matches(std::uint32_t want_source, std::uint64_t want_tag, std::uint32_t source,
             std::uint64_t tag) noexcept {
  return (want_source == rank_any_source || want_source == source) &&
         (want_tag == rank_any_tag || want_tag == tag);
}

struct rank_state {
  rank_actor_config config;
  std::shared_ptr<outbox> out;
  std::deque<envelope> unexpected;        // arrival order
  std::deque<pending_receive> receives;   // post order
  std::uint64_t next_receive_id = 1;
  rank_stats stats;
  static inline const char* name = "vessel.rank";

  // Messages still unexpected when the actor ends give their credit back: a restarted rank
  // must not leave its senders stalled.
  ~rank_state() {
    if (!out) return;
    for (const auto& e : unexpected) out->release(e.source, e.data.size());
  }

  // Hands `e` to its receive and gives its bytes back to the sender as credit.
  void complete(pending_receive& r, envelope&& e) {
    ++stats.received;
    out->release(e.source, e.data.size());
    r.promise.deliver(std::move(e));
  }
};

using self_ptr = rank_impl_actor::stateful_pointer<rank_state>;

rank_impl_actor::behavior_type rank_impl(self_ptr self, rank_actor_config config,
                                         std::shared_ptr<outbox> out) {
  keep_exception_text(self);
  self->state.config = config;
  self->state.out = std::move(out);
  return {
      [self](send_atom, std::uint32_t dst, std::uint64_t tag,
             payload& data) -> caf::result<sent_atom> {
        auto& st = self->state;
        if (dst >= st.config.world_size) {
          ++st.stats.send_errors;
          return to_caf_error(errc::rank_out_of_range,
                              "send to rank " + std::to_string(dst) + " in a world of " +
                                  std::to_string(st.config.world_size));
        }
        if (!st.out->send(dst, tag, std::move(data).take())) {
          ++st.stats.send_errors;
          return to_caf_error(actor_errc::node_stopped, "the node's reactor has stopped");
        }
        ++st.stats.sends;
        return sent_atom::value;
      },
      [self](recv_atom, std::uint32_t source, std::uint64_t tag,
             caf::timespan timeout) -> caf::typed_response_promise<envelope> {
        auto& st = self->state;
        pending_receive r{st.next_receive_id++, source, tag,
                          self->make_response_promise<envelope>()};
        auto promise = r.promise;
        for (auto it = st.unexpected.begin(); it != st.unexpected.end(); ++it) {
          if (matches(source, tag, it->source, it->tag)) {
            envelope e = std::move(*it);
            st.unexpected.erase(it);
            st.complete(r, std::move(e));
            return promise;
          }
        }
        if (timeout <= caf::timespan::zero()) {
          ++st.stats.receive_timeouts;
          r.promise.deliver(to_caf_error(actor_errc::receive_timeout, "no message waiting"));
          return promise;
        }
        const auto id = r.id;
        st.receives.push_back(std::move(r));
        if (timeout != caf::timespan::max()) {
          self->delayed_send(self, timeout, recv_timeout_atom::value, id);
        }
        return promise;
      },
      [self](stats_atom) {
        auto s = self->state.stats;
        s.unexpected = self->state.unexpected.size();
        s.pending_receives = self->state.receives.size();
        return s;
      },
      [self](const event_batch<inbound_message>& batch) {
        auto& st = self->state;
        ++st.stats.batches;
        for (auto& m : batch.events()) {
          envelope e{m.src, m.tag, m.message_id, payload{std::move(m.payload)}};
          auto it = st.receives.begin();
          while (it != st.receives.end() && !matches(it->source, it->tag, e.source, e.tag)) ++it;
          if (it == st.receives.end()) {
            st.unexpected.push_back(std::move(e));
            continue;
          }
          st.complete(*it, std::move(e));
          st.receives.erase(it);
        }
      },
      [self](recv_timeout_atom, std::uint64_t id) {
        auto& st = self->state;
        for (auto it = st.receives.begin(); it != st.receives.end(); ++it) {
          if (it->id != id) continue;
          ++st.stats.receive_timeouts;
          std::string what = "no message from ";
          what += it->source == rank_any_source ? std::string{"any source"}
                                                : "rank " + std::to_string(it->source);
          what += it->tag == rank_any_tag ? std::string{" with any tag"}
                                          : " with tag " + std::to_string(it->tag);
          what += " arrived in time";
          it->promise.deliver(to_caf_error(actor_errc::receive_timeout, std::move(what)));
          st.receives.erase(it);
          return;
        }
      },
  };
}

}  // namespace

rank_impl_actor spawn_rank_actor(caf::actor_system& sys, rank_actor_config config,
                                 std::shared_ptr<outbox> out) {
  return sys.spawn(rank_impl, config, std::move(out));
}

}  // namespace vessel::actors
