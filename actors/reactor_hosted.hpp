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
#include <utility>

#include <caf/actor_config.hpp>
#include <caf/execution_unit.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/resumable.hpp>

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

 protected:
  ~reactor_resident() = default;

 private:
  resident_unit own_unit_;
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
};

}  // namespace vessel::actors
