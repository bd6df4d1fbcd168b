#pragma once
// Actors that run on a reactor thread instead of a CAF worker.
//
// The rank actor's work per message (match a receive, hand a send to the outbox) is a few hundred
// nanoseconds; what costs is getting there: the reactor hands each batch to a CAF worker, which
// hands each send back to the reactor, a thread crossing (a wake-up or a context switch, ~5 µs
// even on one core) each way on both ranks. Hosted on the reactor thread, as CAF's own brokers
// live on their multiplexer's thread, the actor is resumed where its inbound batches are made and
// its sends are drained: per direction one crossing is left on each side, the app's.
//
// CAF schedules an actor by calling `exec_later` on the execution unit passed to its `enqueue`
// (or `launch`); `on_reactor_thread<Base>` passes its own resident_unit whatever the sender
// passed. The unit posts a resumption to the reactor, bounded to `max_throughput` messages so that
// I/O is served between resumptions. Actors the resident one sends to or spawns are not residents
// and go to CAF's scheduler, and so does everything once the reactor has stopped.

#include <cstddef>
#include <exception>
#include <utility>
#include <vector>

#include <caf/abstract_actor.hpp>
#include <caf/actor_config.hpp>
#include <caf/error.hpp>
#include <caf/execution_unit.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/resumable.hpp>
#include <caf/sec.hpp>

#include "io/reactor.hpp"

namespace vessel::actors {

class reactor_execution_unit;
class reactor_resident;

/// A resident's own execution unit, passed to CAF whenever the resident is enqueued, launched or
/// resumed. A job it is asked to run is either the resident itself (posted to the reactor), or an
/// actor the resident sent to while running here (CAF's scheduler: residents pass their own unit
/// when enqueued, so they never reach another's). Telling the two apart is a pointer comparison:
/// a shared unit needs a cross-cast per message, and that dynamic_cast (its type names compared
/// by strcmp across shared objects) was 5% of a hosted ping-pong's profile.
class resident_unit final : public caf::execution_unit {
 public:
  resident_unit(reactor_execution_unit& host, reactor_resident& resident) noexcept;
  /// Any thread.
  void exec_later(caf::resumable* job) override;
  reactor_execution_unit& host() const noexcept { return *host_; }

 private:
  reactor_execution_unit* host_;
  reactor_resident* resident_;
};

/// What a resident lets go of when it ends: state CAF does not know about that may hold the
/// actor itself (rank_port's waiting handlers, whose response promises do), as CAF drops an
/// ending actor's reply handlers.
class resident_exit_hook {
 public:
  virtual void resident_ends() noexcept = 0;

 protected:
  ~resident_exit_hook() = default;
};

/// The side of a reactor-hosted actor that its execution unit sees.
class reactor_resident {
 public:
  explicit reactor_resident(reactor_execution_unit& host) noexcept : own_unit_{host, *this} {}
  reactor_resident(const reactor_resident&) = delete;
  reactor_resident& operator=(const reactor_resident&) = delete;
  /// The unit hosting this actor, shared with its other residents.
  reactor_execution_unit& unit() const noexcept { return own_unit_.host(); }
  /// The unit CAF is given for this actor.
  resident_unit& own_unit() noexcept { return own_unit_; }
  /// The actor as CAF's scheduler sees it.
  virtual caf::resumable* job() noexcept = 0;
  /// From the actor's thread: `hook` is told when the actor ends (once), and must live as long.
  void call_at_end(resident_exit_hook& hook) { exit_hooks_.push_back(&hook); }

 protected:
  ~reactor_resident() = default;
  void run_exit_hooks() noexcept {
    for (auto* hook : std::exchange(exit_hooks_, {})) hook->resident_ends();
  }

 private:
  resident_unit own_unit_;
  std::vector<resident_exit_hook*> exit_hooks_;
};

/// The reactor thread that residents share. CAF never sees it as an execution unit: each
/// resident hands CAF its own resident_unit, which schedules through this.
class reactor_execution_unit final {
 public:
  /// `reactor` and `sys` must outlive every actor hosted here.
  reactor_execution_unit(caf::actor_system& sys, io::reactor& reactor,
                         std::size_t max_throughput = 32) noexcept;

  io::reactor& reactor() const noexcept { return reactor_; }
  caf::actor_system& system() const noexcept { return sys_; }

 private:
  friend class resident_unit;
  /// Any thread. Posts a run of `resident` to the reactor, or hands it to CAF's scheduler once
  /// the reactor has stopped.
  void schedule(reactor_resident& resident);
  static void resume(void* resident) noexcept;

  caf::actor_system& sys_;
  io::reactor& reactor_;
  std::size_t max_throughput_;
};

/// `Base` (a CAF event-based actor class) scheduled on `unit`'s reactor thread.
template <class Base>
class on_reactor_thread : public Base, public reactor_resident {
 public:
  template <class... Ts>
  on_reactor_thread(caf::actor_config& cfg, reactor_execution_unit* unit, Ts&&... xs)
      : Base(cfg, std::forward<Ts>(xs)...), reactor_resident{*unit} {}

  using Base::enqueue;
  void enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit*) override {
    Base::enqueue(std::move(ptr), &own_unit());
  }
  void launch(caf::execution_unit*, bool lazy, bool hide) override {
    Base::launch(&own_unit(), lazy, hide);
  }
  caf::resumable* job() noexcept override { return this; }
  bool cleanup(caf::error&& reason, caf::execution_unit* host) override {
    run_exit_hooks();
    return Base::cleanup(std::move(reason), host);
  }

  /// Reactor thread, between this actor's runs (from a work item of its own): runs `f` as one of
  /// its handlers would run, for what completes without a message (rank_port's receives).
  /// Nothing runs once the actor is ending (false); a quit() in `f` ends it here, as at the end
  /// of a handler, and so does an exception, with its text (as keep_exception_text does for one
  /// from a handler: CAF's exception handler is not reachable from outside its runs).
  template <class F>
  bool run_as_handler(F&& f) {
    using caf::abstract_actor;
    if (this->getf(abstract_actor::is_shutting_down_flag | abstract_actor::is_terminated_flag |
                   abstract_actor::is_cleaned_up_flag))
      return false;
    this->current_mailbox_element(nullptr);  // the last run's, gone: no request here to answer
    try {
      std::forward<F>(f)();
    } catch (const std::exception& e) {
      this->quit(caf::make_error(caf::sec::runtime_error, e.what()));
    } catch (...) {
      this->quit(caf::make_error(caf::sec::runtime_error, "unknown exception"));
    }
    this->finalize();
    return true;
  }
};

}  // namespace vessel::actors
