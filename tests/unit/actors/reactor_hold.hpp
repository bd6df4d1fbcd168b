#pragma once
// Holds a reactor's thread busy (tests): constructed, a posted item is running on it and blocks
// until release() or destruction. Whatever the reactor has to run meanwhile waits, so a test can
// tell work that runs there from work that runs elsewhere.

#include <future>
#include <memory>

#include <gtest/gtest.h>

#include "io/reactor.hpp"

namespace vessel::actors::testing {

class reactor_hold {
 public:
  explicit reactor_hold(io::reactor& r) {
    auto started = signals_->running.get_future();
    // The item owns the signals too: it may still be inside set_value when this returns.
    held_ = r.post([signals = signals_, released = signals_->release.get_future().share()] {
      signals->running.set_value();
      released.wait();
    });
    EXPECT_TRUE(held_) << "the reactor has stopped";
    if (held_) started.wait();  // items posted before this one have run
  }
  ~reactor_hold() { release(); }
  reactor_hold(const reactor_hold&) = delete;
  reactor_hold& operator=(const reactor_hold&) = delete;

  void release() {
    if (!held_) return;
    held_ = false;
    signals_->release.set_value();
  }

 private:
  struct signals {
    std::promise<void> running;
    std::promise<void> release;
  };
  std::shared_ptr<signals> signals_ = std::make_shared<signals>();
  bool held_ = false;
};

}  // namespace vessel::actors::testing
