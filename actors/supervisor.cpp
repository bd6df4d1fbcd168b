#include "actors/supervisor.hpp"

#include <algorithm>
#include <deque>
#include <random>
#include <string>

#include <caf/event_based_actor.hpp>
#include <caf/make_message.hpp>
#include <caf/message_id.hpp>
#include <caf/exit_reason.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include "io/log.hpp"

namespace vessel::actors {
namespace {

using clock = std::chrono::steady_clock;

// Exit reasons kept per child for the escalation message.
constexpr std::size_t kept_reasons = 3;

struct child_slot {
  child_spec spec;
  caf::actor current;         // invalid while stopped or waiting for a restart
  caf::actor_addr previous;   // the last ended incarnation: an exit it linked may still be queued
  std::uint64_t generation = 0;
  std::uint32_t starts = 0;
  std::deque<clock::time_point> failures;  // within the window
  std::deque<std::string> reasons;         // the last few, newest last
  io::backoff backoff;
  bool removed = false;  // ended for good (temporary, transient after a clean exit)
};

struct supervisor_state {
  supervisor_config config;
  std::vector<child_slot> children;
  // Addresses of the children started, shared with the functor that stops them should this
  // supervisor end without its orderly shutdown (killed, or a bug in a handler).
  std::shared_ptr<std::vector<caf::actor_addr>> live =
      std::make_shared<std::vector<caf::actor_addr>>();
  bool stopping = false;
  caf::error stop_reason;
  static inline const char* name = "vessel.supervisor";
};

using self_ptr = caf::stateful_actor<supervisor_state>*;

void notify(self_ptr self, supervisor_event::kind what, const child_slot& c,
            std::uint32_t attempt = 0, std::chrono::nanoseconds delay = {},
            std::string reason = {}) {
  if (!self->state.config.observer) return;
  self->state.config.observer(supervisor_event{what, self->state.config.name, c.spec.name, attempt,
                                               delay, std::move(reason)});
}

std::uint64_t seed_for(const supervisor_config& config, std::size_t index) {
  if (config.seed == 0) return std::random_device{}();
  return config.seed + index * 0x9e3779b97f4a7c15ULL;
}

void stop_next_or_quit(self_ptr self);
void child_failed(self_ptr self, std::size_t index, const caf::error& reason);

// Starts (or restarts) child `index`. A factory that returns no actor counts as a failure.
void start_child(self_ptr self, std::size_t index) {
  auto& c = self->state.children[index];
  ++c.generation;
  ++c.starts;
  caf::actor child;
  try {
    child = c.spec.start(self->system());
  } catch (...) {
    child_failed(self, index, exception_to_caf_error(std::current_exception()));
    return;
  }
  if (!child) {
    child_failed(self, index,
                 to_caf_error(actor_errc::child_start_failed,
                              "the factory of child '" + c.spec.name + "' returned no actor"));
    return;
  }
  c.current = child;
  self->monitor(child);
  self->state.live->push_back(child.address());
  notify(self, supervisor_event::kind::started, c, c.starts);
}

// Gives up on a child: log, stop every other child in reverse order, then fail.
void escalate(self_ptr self, std::size_t index) {
  auto& c = self->state.children[index];
  const auto& cfg = self->state.config;
  std::string reasons;
  for (const auto& r : c.reasons) reasons += (reasons.empty() ? "" : "; ") + r;
  std::string detail = "supervisor '" + cfg.name + "': child '" + c.spec.name + "' failed " +
                       std::to_string(c.failures.size()) + " times within " +
                       std::to_string(cfg.window.count()) + " ms (limit " +
                       std::to_string(cfg.max_restarts) + "); last reasons: " + reasons;
  log::get("actors").error("{}; giving up on it and failing the supervisor", detail);
  notify(self, supervisor_event::kind::escalated, c, static_cast<std::uint32_t>(c.failures.size()),
         {}, reasons);
  c.removed = true;
  self->state.stopping = true;
  self->state.stop_reason = to_caf_error(actor_errc::child_escalated, std::move(detail));
  stop_next_or_quit(self);
}

// Counts a failure of child `index` and restarts it after a backoff delay, or escalates.
void child_failed(self_ptr self, std::size_t index, const caf::error& reason) {
  auto& c = self->state.children[index];
  const auto& cfg = self->state.config;
  const auto now = clock::now();
  while (!c.failures.empty() && now - c.failures.front() > cfg.window) c.failures.pop_front();
  if (c.failures.empty()) c.backoff.reset();  // a whole window without failure: start over
  c.failures.push_back(now);
  c.reasons.push_back(reason ? describe(reason) : std::string{"normal exit"});
  while (c.reasons.size() > kept_reasons) c.reasons.pop_front();
  const auto attempt = static_cast<std::uint32_t>(c.failures.size());
  notify(self, supervisor_event::kind::failed, c, attempt, {}, c.reasons.back());
  if (attempt > cfg.max_restarts) {
    escalate(self, index);
    return;
  }
  // max_attempts in the policy is not used here: the window bounds restarts instead.
  const auto delay = c.backoff.next().value_or(cfg.restart_backoff.max_delay);
  log::get("actors").warn("supervisor '{}': child '{}' ended ({}); restart {} of {} in {} us",
                          cfg.name, c.spec.name, c.reasons.back(), attempt, cfg.max_restarts,
                          std::chrono::duration_cast<std::chrono::microseconds>(delay).count());
  notify(self, supervisor_event::kind::restart_scheduled, c, attempt, delay);
  self->delayed_send(self, delay, restart_atom::value, static_cast<std::uint64_t>(index),
                     c.generation);
}

// During shutdown: stops the last running child and waits for its down message; quits when
// none is left.
void stop_next_or_quit(self_ptr self) {
  auto& children = self->state.children;
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    if (!it->current) continue;
    self->send_exit(it->current, caf::exit_reason::user_shutdown);
    self->delayed_send(self, self->state.config.shutdown_timeout, stop_timeout_atom::value,
                       static_cast<std::uint64_t>(children.rend() - it - 1), it->generation);
    return;
  }
  self->quit(self->state.stop_reason);
}

void begin_shutdown(self_ptr self, caf::error reason) {
  if (self->state.stopping) return;
  self->state.stopping = true;
  self->state.stop_reason = std::move(reason);
  stop_next_or_quit(self);
}

void on_down(self_ptr self, caf::down_msg& dm) {
  auto& children = self->state.children;
  const auto it = std::find_if(children.begin(), children.end(), [&](const child_slot& c) {
    return c.current && c.current.address() == dm.source;
  });
  if (it == children.end()) return;  // not a current child (stale monitor)
  const auto index = static_cast<std::size_t>(it - children.begin());
  it->previous = it->current.address();
  it->current = nullptr;
  auto& live = *self->state.live;
  live.erase(std::remove(live.begin(), live.end(), dm.source), live.end());
  if (self->state.stopping) {
    notify(self, supervisor_event::kind::stopped, *it, 0, {}, describe(dm.reason));
    stop_next_or_quit(self);
    return;
  }
  const bool clean = !dm.reason || dm.reason == caf::exit_reason::user_shutdown;
  switch (it->spec.mode) {
    case restart_mode::permanent: break;
    case restart_mode::transient:
      if (!clean) break;
      [[fallthrough]];
    case restart_mode::temporary:
      it->removed = true;
      notify(self, supervisor_event::kind::stopped, *it, 0, {}, describe(dm.reason));
      return;
  }
  child_failed(self, index, dm.reason);
}

void on_exit(self_ptr self, caf::exit_msg& em) {
  // From a child (a factory may have linked it): its down message does the work.
  for (const auto& c : self->state.children) {
    if ((c.current && c.current.address() == em.source) || c.previous == em.source) return;
  }
  begin_shutdown(self, em.reason ? std::move(em.reason) : caf::error{caf::exit_reason::normal});
}

caf::behavior supervisor_impl(self_ptr self, supervisor_config config,
                              std::vector<child_spec> children) {
  keep_exception_text(self);
  self->state.config = std::move(config);
  auto& st = self->state;
  st.children.reserve(children.size());
  for (auto& spec : children) {
    const auto index = st.children.size();
    st.children.push_back(child_slot{std::move(spec), {}, {}, 0, 0, {}, {},
                                     io::backoff{st.config.restart_backoff,
                                                 seed_for(st.config, index)},
                                     false});
  }
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  self->attach_functor([live = self->state.live](const caf::error& reason) {
    for (const auto& addr : *live) {
      // anon_send_exit() takes only an exit_reason; this keeps the full error (as it does).
      if (auto child = caf::actor_cast<caf::actor>(addr)) {
        auto why = reason ? reason : caf::error{caf::exit_reason::user_shutdown};
        child->enqueue(nullptr, caf::make_message_id(),
                       caf::make_message(caf::exit_msg{child.address(), std::move(why)}), nullptr);
      }
    }
  });
  self->set_exit_handler([self](caf::exit_msg& em) { on_exit(self, em); });
  for (std::size_t i = 0; i < self->state.children.size() && !self->state.stopping; ++i) {
    start_child(self, i);
  }
  return {
      [self](restart_atom, std::uint64_t index, std::uint64_t generation) {
        auto& slots = self->state.children;
        if (self->state.stopping || index >= slots.size()) return;
        auto& c = slots[index];
        if (c.removed || c.current || c.generation != generation) return;
        start_child(self, index);
      },
      [self](stop_timeout_atom, std::uint64_t index, std::uint64_t generation) {
        auto& slots = self->state.children;
        if (index >= slots.size()) return;
        auto& c = slots[index];
        if (!c.current || c.generation != generation) return;
        log::get("actors").error("supervisor '{}': child '{}' did not stop within {} ms; kill it",
                                 self->state.config.name, c.spec.name,
                                 self->state.config.shutdown_timeout.count());
        self->send_exit(c.current, caf::exit_reason::kill);
      },
      [self](start_child_atom, child_spec& spec) -> caf::result<caf::actor> {
        auto& state = self->state;
        if (state.stopping) {
          return to_caf_error(actor_errc::node_stopped,
                              "supervisor '" + state.config.name + "' is stopping");
        }
        const auto index = state.children.size();
        state.children.push_back(child_slot{std::move(spec), {}, {}, 0, 0, {}, {},
                                            io::backoff{state.config.restart_backoff,
                                                        seed_for(state.config, index)},
                                            false});
        start_child(self, index);
        return self->state.children[index].current;
      },
      [self](child_atom, const std::string& name) -> caf::result<caf::actor> {
        for (const auto& c : self->state.children) {
          if (c.spec.name == name && !c.removed) return c.current;
        }
        return to_caf_error(actor_errc::no_such_child,
                            "supervisor '" + self->state.config.name + "' has no child '" + name +
                                "'");
      },
  };
}

}  // namespace

caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_config config,
                            std::vector<child_spec> children) {
  return sys.spawn(supervisor_impl, std::move(config), std::move(children));
}

child_spec supervisor_child(std::string name, supervisor_config config,
                            std::vector<child_spec> children) {
  if (config.name == supervisor_config{}.name) config.name = name;
  return child_spec{std::move(name),
                    [config = std::move(config), children = std::move(children)](
                        caf::actor_system& sys) { return spawn_supervisor(sys, config, children); },
                    restart_mode::permanent};
}

}  // namespace vessel::actors
