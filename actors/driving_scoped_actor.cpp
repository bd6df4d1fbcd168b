#include "actors/driving_scoped_actor.hpp"

#include <sched.h>

#include <atomic>
#include <chrono>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/make_actor.hpp>

#include "actors/drive_budget.hpp"
#include "actors/node.hpp"

namespace vessel::actors {
namespace {

using clock = std::chrono::steady_clock;

/// caf::scoped_actor's own actor, but its waits drive the node's loop first.
class driving_actor final : public caf::blocking_actor {
 public:
  driving_actor(caf::actor_config& cfg, vessel::node* n) : blocking_actor{cfg}, node_{n} {
    setf(is_detached_flag);
  }

  void act() override {}  // never launched: its thread is the one that made it
  const char* name() const override { return "driving_scoped_actor"; }

  void await_data() override {
    if (has_data()) return;
    drive(clock::time_point::max());
    if (has_data()) return;
    sleeping_waits.fetch_add(1, std::memory_order_relaxed);
    blocking_actor::await_data();
  }

  bool await_data(timeout_type timeout) override {
    if (has_data()) return true;
    const auto left = timeout - timeout_type::clock::now();
    drive(clock::now() + std::chrono::duration_cast<clock::duration>(left));
    if (has_data()) return true;
    sleeping_waits.fetch_add(1, std::memory_order_relaxed);
    return blocking_actor::await_data(timeout);
  }

  std::atomic<std::uint64_t> driven_waits{0};
  std::atomic<std::uint64_t> sleeping_waits{0};

 private:
  // What the base's wait looks for: a message not yet looked at (skipped ones stay cached).
  bool has_data() { return !mailbox().empty(); }

  // Runs turns of the node's loop until a message is here, the budget runs out or the node
  // stops (runtime::drive_until's policy). Nothing when the loop cannot be borrowed.
  void drive(clock::time_point deadline) {
    io::reactor& r = node_->reactor();
    if (!r.borrow()) return;
    driven_waits.fetch_add(1, std::memory_order_relaxed);
    drive_budget budget{node_->caller_progress().spin, deadline};
    const bool yield = node_->waiters_yield();
    bool finished = false;
    for (unsigned i = 0;; ++i) {
      r.borrowed_turn();
      if (has_data()) {
        finished = true;
        // What this turn queued for the loop (an ack, a transport's continuation) goes out now,
        // not when the next holder comes.
        for (int more = 0; more < 4 && r.work_waiting(); ++more) r.borrowed_turn();
        break;
      }
      if (r.stop_requested()) break;
      if (yield) ::sched_yield();  // oversubscribed: the rank we wait for may need this core
      if ((i & 63) == 63 && !budget.keep_going(clock::now(), r.arrivals())) break;
    }
    // Done: the reactor thread stays parked a moment (the next wait is likely near). Still
    // waiting: it takes the loop at once, and whatever it delivers wakes our sleep.
    r.give_back(finished);
  }

  vessel::node* node_;
};

driving_actor& impl(const caf::strong_actor_ptr& p) {
  return *static_cast<driving_actor*>(caf::actor_cast<caf::abstract_actor*>(p));
}

}  // namespace

driving_scoped_actor::driving_scoped_actor(vessel::node& n, bool hide) : context_{&n.system()} {
  caf::actor_config cfg{&context_};
  auto& sys = n.system();
  self_ = caf::make_actor<driving_actor, caf::strong_actor_ptr>(sys.next_actor_id(), sys.node(),
                                                                &sys, cfg, &n);
  if (!hide) ptr()->register_at_system();
}

driving_scoped_actor::~driving_scoped_actor() {
  if (!self_) return;
  auto* x = ptr();
  if (!x->getf(caf::abstract_actor::is_terminated_flag)) {
    x->cleanup(caf::exit_reason::normal, &context_);
  }
}

caf::blocking_actor* driving_scoped_actor::ptr() const noexcept {
  return &impl(self_);
}

std::uint64_t driving_scoped_actor::driven_waits() const noexcept {
  return impl(self_).driven_waits.load(std::memory_order_relaxed);
}

std::uint64_t driving_scoped_actor::sleeping_waits() const noexcept {
  return impl(self_).sleeping_waits.load(std::memory_order_relaxed);
}

}  // namespace vessel::actors
