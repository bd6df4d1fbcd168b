#pragma once
// A supervisor actor (CAF 0.17, event-based): starts children from factories in order, monitors
// each, restarts a child that ends with exponential backoff and full jitter
// (io::backoff), and escalates a child that fails more than `max_restarts` times within `window`:
// it stops restarting, logs the child's name and its last exit reasons, stops its other children
// and fails itself with actor_errc::child_escalated, so that its own supervisor (or the node) sees
// it. An exit message from anyone but a child (its parent's link, anon_send_exit) is an orderly
// shutdown: children stop one at a time in reverse start order, then the supervisor quits.
//
// Children are monitored, not linked: a linked child that is killed (exit_reason::kill) would kill
// the supervisor with it, as kill cannot be trapped. Instead a functor attached to the supervisor
// sends its own exit reason to every child still running should it end without its orderly
// shutdown, so no orphan keeps actor_system's destructor waiting forever (DEPENDENCIES.md 1.7).

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/scheduled_actor.hpp>

#include "actors/actor_errc.hpp"
#include "io/backoff.hpp"

namespace vessel::actors {

/// Adds a new child to a running supervisor: (start_child_atom, child_spec) -> caf::actor.
using start_child_atom = caf::atom_constant<caf::atom("startchild")>;
/// Asks a supervisor for a child's current handle: (child_atom, name) -> caf::actor (invalid
/// while the child waits for its restart); error actor_errc::no_such_child for an unknown name.
using child_atom = caf::atom_constant<caf::atom("child")>;
/// Internal: a delayed restart (child index, generation it replaces).
using restart_atom = caf::atom_constant<caf::atom("restart")>;
/// Internal: a child that did not stop within shutdown_timeout is killed.
using stop_timeout_atom = caf::atom_constant<caf::atom("stoptmo")>;

/// Whether a child that ended is started again.
enum class restart_mode : std::uint8_t {
  permanent,  ///< always restarted, whatever the reason (also a normal exit).
  transient,  ///< restarted after a failure; a normal exit or user_shutdown removes it.
  temporary,  ///< never restarted: its end is only logged.
};

/// How to start one child. `start` runs inside the supervisor (on a CAF worker thread) at first
/// start and at every restart; it returns the new actor, or an invalid handle (counted as a
/// failure of the child).
struct child_spec {
  std::string name;
  std::function<caf::actor(caf::actor_system&)> start;
  restart_mode mode = restart_mode::permanent;
};

/// Something a supervisor did, reported to supervisor_config::observer.
struct supervisor_event {
  enum class kind : std::uint8_t { started, failed, restart_scheduled, escalated, stopped };
  kind what = kind::started;
  std::string supervisor;            ///< supervisor_config::name
  std::string child;                 ///< child_spec::name
  std::uint32_t attempt = 0;         ///< failures of the child within the window (failed/
                                     ///< restart_scheduled/escalated), or its start count (started)
  std::chrono::nanoseconds delay{};  ///< restart_scheduled: the backoff delay chosen
  std::string reason;                ///< failed/escalated/stopped: the exit reason, described
};

/// Every key of a supervisor with its default.
struct supervisor_config {
  std::string name = "supervisor";  ///< names the supervisor in logs, events and its exit reason
  /// Restart delays. Attempt n waits up to initial_delay * multiplier^n (full jitter); the
  /// attempt count starts over once a child has run a whole window without failing.
  io::reconnect_policy restart_backoff{std::chrono::milliseconds{10}, std::chrono::seconds{5}, 2.0,
                                       0, true};
  std::uint32_t max_restarts = 5;  ///< failures tolerated within `window`; one more escalates
  std::chrono::milliseconds window{std::chrono::seconds{10}};
  /// A child that has not stopped this long after its exit message is killed (exit_reason::kill
  /// cannot be trapped), so a child that ignores shutdown cannot hang the process.
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds{5}};
  std::uint64_t seed = 0;  ///< backoff jitter seed; 0: from std::random_device
  /// Called on the supervisor's thread for every event (keep it short; it may not block).
  std::function<void(const supervisor_event&)> observer;
};

/// Installs an exception handler on `self` that keeps the exception's text in the exit reason
/// (actor_errc::unhandled_exception). CAF 0.17's default reports only "runtime_error".
inline void keep_exception_text(caf::scheduled_actor* self) {
  self->set_exception_handler(
      [](caf::scheduled_actor*, std::exception_ptr& ex) { return exception_to_caf_error(ex); });
}

namespace detail {
template <class Self, class Result, class... Args>
auto with_exception_text(Result (*fun)(Self*, Args...)) {
  return [fun](Self* self, Args... args) -> Result {
    keep_exception_text(self);
    return fun(self, std::move(args)...);
  };
}
}  // namespace detail

/// A child spawned from an actor function `fun(self, args...)` (a plain function: its exceptions
/// keep their text) or any other callable CAF can spawn; `args` are copied for every restart.
template <class F, class... Ts>
child_spec make_child(std::string name, F fun, Ts... args) {
  auto start = [fun, args...](caf::actor_system& sys) -> caf::actor {
    if constexpr (std::is_pointer_v<F> && std::is_function_v<std::remove_pointer_t<F>>) {
      return caf::actor_cast<caf::actor>(sys.spawn(detail::with_exception_text(fun), args...));
    } else {
      return caf::actor_cast<caf::actor>(sys.spawn(fun, args...));
    }
  };
  return child_spec{std::move(name), std::move(start), restart_mode::permanent};
}

/// Spawns a supervisor that starts `children` in order.
caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_config config,
                            std::vector<child_spec> children);

/// A child that is itself a supervisor (nested supervision trees).
child_spec supervisor_child(std::string name, supervisor_config config,
                            std::vector<child_spec> children);

}  // namespace vessel::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::actors::child_spec)
