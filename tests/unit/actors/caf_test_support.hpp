#pragma once
// A gtest fixture that owns a caf::actor_system by unique_ptr (built in SetUp, destroyed in
// TearDown: the destructor waits for every actor, so a test that leaves one running hangs there
// and ctest's timeout names it), and a thread-safe log that tests wait on instead of sleeping.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>

namespace vessel::actors::testing {

class caf_test : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.set("scheduler.max-threads", 2);
    system_ = std::make_unique<caf::actor_system>(config_);
  }
  void TearDown() override { system_.reset(); }

  caf::actor_system& sys() { return *system_; }

  /// Actors still running, not counting `exclude` (scoped actors of the test itself).
  std::size_t running_actors(std::size_t exclude = 0) const {
    return system_->registry().running() - exclude;
  }

  caf::actor_system_config config_;
  std::unique_ptr<caf::actor_system> system_;
};

/// Events appended from actor threads, awaited from the test thread.
template <class T>
class waitable_log {
 public:
  void push(T value) {
    {
      const std::lock_guard lock{mutex_};
      items_.push_back(std::move(value));
    }
    changed_.notify_all();
  }

  /// Waits until `done(items)` holds (true) or `timeout` passes (false).
  bool wait_until(const std::function<bool(const std::vector<T>&)>& done,
                  std::chrono::milliseconds timeout = std::chrono::seconds{10}) {
    std::unique_lock lock{mutex_};
    return changed_.wait_for(lock, timeout, [&] { return done(items_); });
  }

  std::vector<T> snapshot() const {
    const std::lock_guard lock{mutex_};
    return items_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<T> items_;
};

/// Kills `a` and waits until it is down (nothing it holds outlives the test's next step).
inline void kill_and_wait(caf::scoped_actor& self, const caf::actor& a) {
  self->monitor(a);
  self->send_exit(a, caf::exit_reason::kill);
  self->receive([](const caf::down_msg&) {});
}

}  // namespace vessel::actors::testing
