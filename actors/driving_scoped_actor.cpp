#include "actors/driving_scoped_actor.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/make_actor.hpp>

#include "actors/actor_errc.hpp"
#include "actors/caller_progress.hpp"
#include "actors/node.hpp"
#include "actors/rank_actor.hpp"

namespace vessel::actors {
namespace {

using clock = std::chrono::steady_clock;

/// caf::scoped_actor's own actor, but its waits drive the node's loop first.
class driving_actor final : public caf::blocking_actor, private receive_waiter {
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

  caf::error send_to(const rank_actor& rank, std::uint32_t dst, std::uint64_t tag, payload data) {
    if (auto* direct = direct_entry_of(rank); direct != nullptr && node_->reactor().borrow()) {
      const auto outcome = direct->try_send(dst, tag, data);
      node_->reactor().give_back(true);
      switch (outcome) {
        case rank_direct_entry::send_outcome::sent:
          direct_sends.fetch_add(1, std::memory_order_relaxed);
          return {};
        case rank_direct_entry::send_outcome::stopped:
          return to_caf_error(actor_errc::node_stopped, "the node's reactor has stopped");
        case rank_direct_entry::send_outcome::not_taken: break;  // no room now: the request waits
      }
    }
    caf::error failed;
    request(rank, caf::infinite, send_atom::value, dst, tag, std::move(data))
        .receive([](sent_atom) {}, [&](caf::error& e) { failed = std::move(e); });
    return failed;
  }

  caf::expected<envelope> receive_from(const rank_actor& rank, std::uint32_t source,
                                       std::uint64_t tag, caf::timespan timeout) {
    if (auto* direct = direct_entry_of(rank); direct != nullptr && node_->reactor().borrow()) {
      io::reactor& r = node_->reactor();
      std::optional<envelope> got;
      direct_wait wait{timeout, this, caf::actor_cast<caf::weak_actor_ptr>(this), begin_wait()};
      switch (direct->try_receive(source, tag, wait, got)) {
        case rank_direct_entry::receive_outcome::taken:
          r.give_back(true);
          direct_receives.fetch_add(1, std::memory_order_relaxed);
          return std::move(*got);
        case rank_direct_entry::receive_outcome::waiting:
          direct_receives.fetch_add(1, std::memory_order_relaxed);
          return finish_wait(r);
        case rank_direct_entry::receive_outcome::not_taken:  // nothing here, no time to wait
          r.give_back(true);
          break;
      }
    }
    std::optional<caf::expected<envelope>> out;
    request(rank, caf::infinite, recv_atom::value, source, tag, timeout)
        .receive([&](envelope& e) { out.emplace(std::move(e)); },
                 [&](caf::error& e) { out.emplace(std::move(e)); });
    return std::move(*out);
  }

  std::atomic<std::uint64_t> driven_waits{0};
  std::atomic<std::uint64_t> sleeping_waits{0};
  std::atomic<std::uint64_t> direct_sends{0};
  std::atomic<std::uint64_t> direct_receives{0};

 private:
  // What the base's wait looks for: a message not yet looked at (skipped ones stay cached).
  bool has_data() { return !mailbox().empty(); }

  // Runs turns of the node's loop until a message is here, the budget runs out or the node
  // stops. Nothing when the loop cannot be borrowed.
  void drive(clock::time_point deadline) {
    io::reactor& r = node_->reactor();
    if (!r.borrow()) return;
    driven_waits.fetch_add(1, std::memory_order_relaxed);
    drive_held(r, deadline, [this] { return has_data(); });
  }

  // Turns of the loop this thread holds until `done()`, the budget runs out or the node stops,
  // then gives it back. True when `done()`.
  template <class Done>
  bool drive_held(io::reactor& r, clock::time_point deadline, Done done) {
    drive_budget budget{node_->caller_progress().spin, deadline};
    const bool finished = drive_held_loop(r, budget, node_->waiters_yield(), done);
    // Done: the reactor thread stays parked a moment (the next wait is likely near). Still
    // waiting: it takes the loop at once, and whatever it delivers wakes our sleep.
    r.give_back(finished);
    return finished;
  }

  // -- a receive posted by a call -------------------------------------------------------------

  std::uint64_t begin_wait() {
    const std::lock_guard lock{wait_mutex_};
    wait_result_.reset();
    wait_done_.store(false, std::memory_order_relaxed);
    return ++wait_token_;
  }

  // From the rank actor, on whichever thread holds the loop: this one while it drives, else the
  // reactor thread, whose result wakes our sleep.
  void received(std::uint64_t token, caf::expected<envelope> result,
                caf::strong_actor_ptr) override {
    {
      const std::lock_guard lock{wait_mutex_};
      if (token != wait_token_) return;  // a wait given up as the node stopped
      wait_result_.emplace(std::move(result));
      wait_done_.store(true, std::memory_order_release);
    }
    wait_changed_.notify_one();
  }

  // Drives the loop until the posted receive completes (or the budget runs out), then sleeps
  // until it does. The rank actor times it out; only a node that stops leaves it unanswered.
  caf::expected<envelope> finish_wait(io::reactor& r) {
    const bool finished = drive_held(r, clock::time_point::max(),
                                     [this] { return wait_done_.load(std::memory_order_acquire); });
    std::unique_lock lock{wait_mutex_};
    if (!finished) sleeping_waits.fetch_add(1, std::memory_order_relaxed);
    while (!wait_result_) {
      if (wait_changed_.wait_for(lock, std::chrono::milliseconds{10}) == std::cv_status::timeout &&
          !wait_result_ && r.stop_requested()) {
        ++wait_token_;
        return to_caf_error(actor_errc::node_stopped, "the node stopped during a receive");
      }
    }
    auto out = std::move(*wait_result_);
    wait_result_.reset();
    return out;
  }

  vessel::node* node_;
  std::mutex wait_mutex_;
  std::condition_variable wait_changed_;
  std::uint64_t wait_token_ = 0;                        // under wait_mutex_
  std::optional<caf::expected<envelope>> wait_result_;  // under wait_mutex_
  std::atomic<bool> wait_done_{false};                  // read without it while driving
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

std::uint64_t driving_scoped_actor::direct_sends() const noexcept {
  return impl(self_).direct_sends.load(std::memory_order_relaxed);
}

std::uint64_t driving_scoped_actor::direct_receives() const noexcept {
  return impl(self_).direct_receives.load(std::memory_order_relaxed);
}

caf::error driving_scoped_actor::send(const rank_actor& rank, std::uint32_t dst, std::uint64_t tag,
                                      payload data) {
  return impl(self_).send_to(rank, dst, tag, std::move(data));
}

caf::expected<envelope> driving_scoped_actor::receive(const rank_actor& rank, std::uint32_t source,
                                                      std::uint64_t tag, caf::timespan timeout) {
  return impl(self_).receive_from(rank, source, tag, timeout);
}

}  // namespace vessel::actors
