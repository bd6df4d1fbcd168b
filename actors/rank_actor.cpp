#include "actors/rank_actor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actor_errc.hpp"
#include "actors/comm_errc.hpp"
#include "actors/link_credit.hpp"
#include "actors/errc.hpp"
#include "actors/reactor_hosted.hpp"
#include "actors/supervisor.hpp"
#include "io/log.hpp"

namespace vessel::actors {
namespace {

static_assert(rank_any_source == any_source && rank_any_tag == any_tag,
              "the rank actor's wildcards are the matcher's");

using deadline_clock = std::chrono::steady_clock;
/// Receive deadlines, earliest first: cookie of the receive.
using deadline_map = std::multimap<deadline_clock::time_point, std::uint64_t>;

struct pending_receive {
  receive_id id = 0;
  std::uint32_t source = 0;
  std::uint64_t tag = 0;
  caf::typed_response_promise<envelope> promise;   // a request's
  direct_wait wait;                                // or, with a waiter, one posted by a call
  std::optional<deadline_map::iterator> deadline;  // none: waits without a timeout
};

struct waiting_send {
  std::uint64_t tag = 0;
  io::buffer_slice payload;
  caf::typed_response_promise<sent_atom> promise;
};

// Credit goes back through the outbox. Counts, per source, the bytes whose credit is still out,
// so that an actor that ends (a restart) gives back what it held and its senders do not stall.
class outbox_credit final : public credit_sink {
 public:
  outbox_credit(std::shared_ptr<outbox> out, std::uint32_t world)
      : out_{std::move(out)}, held_(world, 0) {}
  void arrived(std::uint32_t source, std::size_t bytes) noexcept { held_[source] += bytes; }
  void release(std::uint32_t source, std::size_t bytes) override {
    held_[source] -= bytes;
    out_->release(source, bytes);
  }
  void on_backpressure(bool over_bound) override {
    log::get("actors").debug("rank actor: unexpected queue {} its bound",
                             over_bound ? "over" : "back under");
  }
  void release_all() {
    for (std::uint32_t s = 0; s < held_.size(); ++s) {
      if (held_[s] > 0) out_->release(s, held_[s]);
      held_[s] = 0;
    }
  }
  outbox& out() noexcept { return *out_; }

 private:
  std::shared_ptr<outbox> out_;
  std::vector<std::size_t> held_;
};

// What a hosted rank's direct entry and its behaviour share (hosted_rank below).
struct direct_arrivals {
  static constexpr int free = 0, taking = 1, running = 2;
  // Who uses the state: the actor's run, a direct take, or neither. Both happen on the reactor
  // thread; only once the reactor has stopped may a run move to a CAF worker, and then this
  // keeps a late take from racing it.
  std::atomic<int> user{free};
  std::atomic<std::uint32_t> queued{0};  // batches sent as messages and not yet taken
  bool live = false;                     // the behaviour is made and the state not yet destroyed
  io::reactor* reactor = nullptr;        // the thread where receives posted by calls complete
};

struct rank_state {
  rank_actor_config config;
  direct_arrivals* direct = nullptr;  // hosted only
  std::unique_ptr<outbox_credit> credit;
  std::unique_ptr<message_matcher> matcher;
  std::unordered_map<std::uint64_t, pending_receive> receives;  // by cookie
  std::vector<std::deque<waiting_send>> waiting;                // by destination
  // One CAF timer for all receives: the earliest deadline's. A delayed_send per receive wakes
  // CAF's clock thread on every receive (its queue's condition variable), a thread hand-off
  // more per message on the actor path, and leaves an entry there until its timeout passes.
  deadline_map deadlines;
  std::optional<deadline_clock::time_point> tick_at;  // the earliest tick scheduled, if any
  std::uint64_t next_cookie = 1;
  rank_stats stats;
  static inline const char* name = "vessel.rank";

  ~rank_state() {
    if (direct != nullptr) direct->live = false;
    // Every receive and parked send still waiting is told, a request's as a receive posted by a
    // call: CAF 0.17 drops an accepted request's promise without a word when its actor ends, and
    // a caller that waits without a timeout (a scoped actor's receive) would wait forever.
    for (auto& [cookie, r] : receives) {
      complete(r, to_caf_error(actor_errc::node_stopped, "the rank actor has ended"));
    }
    for (auto& parked : waiting) {
      for (auto& w : parked) {
        w.promise.deliver(to_caf_error(actor_errc::node_stopped, "the rank actor has ended"));
      }
    }
    matcher.reset();  // drops unexpected payloads (their blocks go back to the pool)
    if (credit) credit->release_all();
  }

  void deliver(pending_receive& r, p2p_message&& m) {
    if (r.deadline) deadlines.erase(*r.deadline);
    complete(r, received_now(std::move(m)));
  }

  // Answers a posted receive: the reply to its request, or its waiter's call.
  void complete(pending_receive& r, caf::expected<envelope> result) {
    if (r.wait.waiter == nullptr) {
      if (result)
        r.promise.deliver(std::move(*result));
      else
        r.promise.deliver(std::move(result.error()));
      return;
    }
    // Waiters live in actors resident on the reactor thread and are touched there only. Off it
    // (the reactor has stopped and this actor runs on a CAF worker) the node is going down, and
    // the result goes where a reply to an actor that has gone goes.
    if (direct == nullptr || direct->reactor == nullptr || !direct->reactor->is_reactor_thread()) {
      log::get("actors").debug("rank actor: a receive posted by a call ended off the reactor");
      return;
    }
    if (auto owner = r.wait.owner.lock())
      r.wait.waiter->received(r.wait.token, std::move(result), std::move(owner));
  }

  // A receive that took `m`.
  envelope received_now(p2p_message&& m) {
    ++stats.received;
    return envelope{m.source, m.tag, m.message_id, payload{std::move(m.payload)}};
  }

  // What a receive for (`source`, `tag`) takes at once: the oldest matching unexpected message;
  // nothing (and nothing posted) when there is none or `source` is no rank of this world.
  std::optional<envelope> receive_now(std::uint32_t source, std::uint64_t tag) {
    auto m = matcher->take_now(source, tag);
    if (!m) return std::nullopt;
    return received_now(std::move(*m));
  }

  // Matches a batch of arrivals against the receives posted; the rest waits as unexpected.
  void take_arrivals(const event_batch<inbound_message>& batch) {
    ++stats.batches;
    for (auto& m : batch.events()) match_arrival(m);
  }

  // One arrival handed over alone (hosted_rank::take_arrival): a hand-off of its own.
  void take_arrival(inbound_message& m) {
    ++stats.batches;
    match_arrival(m);
  }

  void match_arrival(inbound_message& m) {
    const std::size_t bytes = m.payload.size();
    const std::uint32_t source = m.src;
    if (source < config.world_size) credit->arrived(source, message_credit(bytes));
    auto done = matcher->arrive(p2p_message{m.src, m.tag, m.message_id, std::move(m.payload)});
    if (!done) {  // not a rank of this world: the transport never delivers one
      log::get("actors").warn("rank actor: dropped a message from rank {}: {}", source,
                              done.error().message());
      return;
    }
    if (!done.value()) return;  // unexpected
    auto it = receives.find(done.value()->cookie);
    if (it == receives.end()) return;  // cannot happen: cancel removes both
    deliver(it->second, std::move(done.value()->message));
    receives.erase(it);
  }

  // A send to `dst` (in range) is answered at once: nothing is parked for it and it has room.
  bool can_send_now(std::uint32_t dst) const {
    return waiting[dst].empty() && credit->out().has_room(dst);
  }

  // False once the node's reactor has stopped (the payload is dropped).
  bool send_now(std::uint32_t dst, std::uint64_t tag, payload& data) {
    if (!credit->out().send(dst, tag, std::move(data).take())) {
      ++stats.send_errors;
      return false;
    }
    ++stats.sends;
    return true;
  }

  // Moves parked sends for `dst` into the outbox while it has room; asks for a callback if not.
  void drain_waiting(std::uint32_t dst) {
    auto& q = waiting[dst];
    while (!q.empty()) {
      if (!credit->out().has_room(dst)) {
        if (!credit->out().wait_for_room(dst)) return;  // a room message follows
        continue;
      }
      auto& w = q.front();
      if (credit->out().send(dst, w.tag, std::move(w.payload))) {
        ++stats.sends;
        w.promise.deliver(sent_atom::value);
      } else {
        ++stats.send_errors;
        w.promise.deliver(to_caf_error(actor_errc::node_stopped, "the node's reactor has stopped"));
      }
      q.pop_front();
    }
  }
};

using self_ptr = rank_impl_actor::stateful_pointer<rank_state>;

std::uint64_t tick_stamp(deadline_clock::time_point t) noexcept {
  return static_cast<std::uint64_t>(t.time_since_epoch().count());
}

/// Schedules a tick for the earliest deadline unless one at or before it is already scheduled.
/// Ticks scheduled for later deadlines stay where they are: they find nothing due, or less.
void arm_deadline_tick(self_ptr self) {
  auto& st = self->state;
  if (st.deadlines.empty()) return;
  const auto next = st.deadlines.begin()->first;
  if (st.tick_at && *st.tick_at <= next) return;
  st.tick_at = next;
  const auto in = std::max(next - deadline_clock::now(), deadline_clock::duration::zero());
  self->delayed_send(self, std::chrono::duration_cast<caf::timespan>(in), recv_timeout_atom::value,
                     tick_stamp(next));
}

// Keeps a posted receive that found nothing here until its message comes or `timeout` passes.
void park(self_ptr self, pending_receive r, std::uint64_t cookie, caf::timespan timeout) {
  auto& st = self->state;
  const auto now = deadline_clock::now();
  const auto wait = std::chrono::duration_cast<deadline_clock::duration>(timeout);
  if (wait < deadline_clock::time_point::max() - now) {  // else: as good as forever
    r.deadline = st.deadlines.emplace(now + wait, cookie);
  }
  st.receives.emplace(cookie, std::move(r));
  arm_deadline_tick(self);
}

std::string describe_receive(std::uint32_t source, std::uint64_t tag) {
  std::string what = "no message from ";
  what += source == rank_any_source ? std::string{"any source"} : "rank " + std::to_string(source);
  what += tag == rank_any_tag ? std::string{" with any tag"} : " with tag " + std::to_string(tag);
  return what;
}

rank_impl_actor::behavior_type rank_impl(self_ptr self, rank_actor_config config,
                                         std::shared_ptr<outbox> out) {
  keep_exception_text(self);
  auto& init = self->state;
  init.config = config;
  init.config.matching.world_size = config.world_size;
  init.credit = std::make_unique<outbox_credit>(std::move(out), config.world_size);
  init.matcher = std::make_unique<message_matcher>(init.config.matching, *init.credit);
  init.waiting.resize(config.world_size);
  return {
      [self](send_atom, std::uint32_t dst, std::uint64_t tag,
             payload& data) -> caf::result<sent_atom> {
        auto& st = self->state;
        if (dst >= st.config.world_size) {
          ++st.stats.send_errors;
          return to_caf_error(errc::rank_out_of_range, "send to rank " + std::to_string(dst) +
                                                           " in a world of " +
                                                           std::to_string(st.config.world_size));
        }
        auto& q = st.waiting[dst];
        if (st.can_send_now(dst)) {
          if (!st.send_now(dst, tag, data))
            return to_caf_error(actor_errc::node_stopped, "the node's reactor has stopped");
          return sent_atom::value;
        }
        if (q.size() >= st.config.max_waiting_sends) {
          ++st.stats.send_errors;
          ++st.stats.sends_pushed_back;
          return to_caf_error(actor_errc::send_pushed_back,
                              std::to_string(q.size()) + " sends to rank " + std::to_string(dst) +
                                  " already wait for its link");
        }
        ++st.stats.sends_delayed;
        auto promise = self->make_response_promise<sent_atom>();
        q.push_back(waiting_send{tag, std::move(data).take(), promise});
        if (q.size() == 1) st.drain_waiting(dst);  // asks for the room callback
        return promise;
      },
      [self](room_atom, std::uint32_t dst) {
        if (dst < self->state.waiting.size()) self->state.drain_waiting(dst);
      },
      [self](recv_atom, std::uint32_t source, std::uint64_t tag,
             caf::timespan timeout) -> caf::result<envelope> {
        auto& st = self->state;
        const std::uint64_t cookie = st.next_cookie++;
        auto posted = st.matcher->post_receive(source, tag, cookie);
        if (!posted) {
          return to_caf_error(posted.error(), "receive from rank " + std::to_string(source) +
                                                  " in a world of " +
                                                  std::to_string(st.config.world_size));
        }
        auto& p = posted.value();
        if (p.message) return st.received_now(std::move(*p.message));
        if (timeout <= caf::timespan::zero()) {
          st.matcher->cancel(p.id);
          ++st.stats.receive_timeouts;
          return to_caf_error(actor_errc::receive_timeout,
                              describe_receive(source, tag) + " waiting");
        }
        auto promise = self->make_response_promise<envelope>();
        park(self, pending_receive{p.id, source, tag, promise, {}, std::nullopt}, cookie, timeout);
        return promise;
      },
      [self](stats_atom) {
        auto s = self->state.stats;
        const auto& m = self->state.matcher->stats();
        s.unexpected = m.unexpected_messages;
        s.unexpected_bytes = m.unexpected_bytes;
        s.credit_withheld = m.credit_withheld;
        s.pending_receives = m.pending_receives;
        s.sends_waiting = 0;
        for (const auto& q : self->state.waiting) s.sends_waiting += q.size();
        return s;
      },
      [self](const event_batch<inbound_message>& batch) {
        auto& st = self->state;
        st.take_arrivals(batch);
        if (st.direct != nullptr) {  // a batch sent without asking take() leaves it at 0
          auto& queued = st.direct->queued;
          auto n = queued.load(std::memory_order_relaxed);
          while (n > 0 && !queued.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
          }
        }
      },
      [self](recv_timeout_atom, std::uint64_t tick) {
        auto& st = self->state;
        if (st.tick_at && tick_stamp(*st.tick_at) == tick) st.tick_at.reset();
        const auto now = deadline_clock::now();
        while (!st.deadlines.empty() && st.deadlines.begin()->first <= now) {
          auto it = st.receives.find(st.deadlines.begin()->second);
          st.deadlines.erase(st.deadlines.begin());
          if (it == st.receives.end()) continue;  // cannot happen: deliver() erases both
          st.matcher->cancel(it->second.id);
          ++st.stats.receive_timeouts;
          auto& r = it->second;
          st.complete(r, to_caf_error(actor_errc::receive_timeout,
                                      describe_receive(r.source, r.tag) + " arrived in time"));
          st.receives.erase(it);
        }
        arm_deadline_tick(self);
      },
  };
}

// The same behaviour, resumed on a reactor thread (reactor_hosted.hpp), which also takes batches
// directly (rank_direct_entry).
class hosted_rank final : public on_reactor_thread<rank_impl_actor::stateful_base<rank_state>>,
                          public rank_direct_entry {
 public:
  hosted_rank(caf::actor_config& cfg, reactor_execution_unit* unit, rank_actor_config config,
              std::shared_ptr<outbox> out)
      : on_reactor_thread{cfg, unit}, config_{config}, out_{std::move(out)} {}

  behavior_type make_behavior() override {
    auto behavior = rank_impl(this, config_, std::move(out_));
    state.direct = &direct_;
    direct_.reactor = &unit().reactor();
    direct_.live = true;
    return behavior;
  }

  resume_result resume(caf::execution_unit* unit, std::size_t max_throughput) override {
    int expected = direct_arrivals::free;
    while (!direct_.user.compare_exchange_weak(expected, direct_arrivals::running,
                                               std::memory_order_acquire)) {
      expected = direct_arrivals::free;
      std::this_thread::yield();  // a take on the reactor thread while this runs on a worker
    }
    const auto result = on_reactor_thread::resume(unit, max_throughput);
    direct_.user.store(direct_arrivals::free, std::memory_order_release);
    return result;
  }

  bool take(event_batch<inbound_message>& batch) override {
    // Off the reactor thread (a flush once it stopped), or while the actor runs (its own send
    // filled a batch and flushed it): as a message, which the handler counts off.
    if (!claim_state()) {
      direct_.queued.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    const bool direct = direct_.live && direct_.queued.load(std::memory_order_relaxed) == 0;
    if (direct) {
      state.take_arrivals(batch);
    } else {
      direct_.queued.fetch_add(1, std::memory_order_relaxed);
    }
    release_state();
    return direct;
  }

  bool take_arrival(inbound_message& m) override {
    if (!claim_state()) return false;
    const bool direct = direct_.live && direct_.queued.load(std::memory_order_relaxed) == 0;
    if (direct) state.take_arrival(m);
    release_state();
    return direct;
  }

  receive_outcome try_receive(std::uint32_t source, std::uint64_t tag, direct_wait& wait,
                              std::optional<envelope>& got) override {
    if (!claim_state()) return receive_outcome::not_taken;
    auto outcome = receive_outcome::not_taken;
    if (direct_.live) outcome = receive_or_wait(source, tag, wait, got);
    release_state();
    return outcome;
  }

  send_outcome try_send(std::uint32_t dst, std::uint64_t tag, payload& data) override {
    if (!claim_state()) return send_outcome::not_taken;
    auto outcome = send_outcome::not_taken;
    if (direct_.live && dst < state.config.world_size && state.can_send_now(dst))
      outcome = state.send_now(dst, tag, data) ? send_outcome::sent : send_outcome::stopped;
    release_state();
    return outcome;
  }

 private:
  // The state for a call, on the reactor thread between the actor's runs; the caller gives it
  // back (release_state). False elsewhere, or while the actor runs.
  bool claim_state() {
    int expected = direct_arrivals::free;
    return unit().reactor().is_reactor_thread() &&
           direct_.user.compare_exchange_strong(expected, direct_arrivals::taking,
                                                std::memory_order_acquire);
  }
  void release_state() { direct_.user.store(direct_arrivals::free, std::memory_order_release); }

  // The receive handler's work without its messages; what it would answer at once with an
  // error (source out of range, nothing here and no time to wait) is left to a request.
  receive_outcome receive_or_wait(std::uint32_t source, std::uint64_t tag, direct_wait& wait,
                                  std::optional<envelope>& got) {
    if (wait.waiter == nullptr || wait.timeout <= caf::timespan::zero()) {
      got = state.receive_now(source, tag);
      return got ? receive_outcome::taken : receive_outcome::not_taken;
    }
    const auto timeout = wait.timeout;
    const std::uint64_t cookie = state.next_cookie++;
    auto posted = state.matcher->post_receive(source, tag, cookie);
    if (!posted) return receive_outcome::not_taken;
    if (posted.value().message) {
      got = state.received_now(std::move(*posted.value().message));
      return receive_outcome::taken;
    }
    park(this, pending_receive{posted.value().id, source, tag, {}, std::move(wait), std::nullopt},
         cookie, timeout);
    return receive_outcome::waiting;
  }

  rank_actor_config config_;
  std::shared_ptr<outbox> out_;
  direct_arrivals direct_;
};

}  // namespace

rank_direct_entry* direct_entry_of(const rank_actor& rank) noexcept {
  auto* actor = caf::actor_cast<caf::abstract_actor*>(rank);
  return actor != nullptr ? dynamic_cast<hosted_rank*>(actor) : nullptr;
}

rank_direct_entry* direct_entry_of(const rank_impl_actor& rank) noexcept {
  return direct_entry_of(rank_actor{rank});
}

rank_impl_actor spawn_rank_actor(caf::actor_system& sys, rank_actor_config config,
                                 std::shared_ptr<outbox> out, reactor_execution_unit* host) {
  register_caf_error_category(comm_category());  // the matcher's errors reach apps as they are
  if (host != nullptr) return sys.spawn<hosted_rank>(host, config, std::move(out));
  return sys.spawn(rank_impl, config, std::move(out));
}

}  // namespace vessel::actors
