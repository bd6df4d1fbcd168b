#pragma once
// What the vessel ends of the transport benchmarks share: a reactor driven by the bench thread
// itself (no hand-off on the measured path, as a link runs its hot loop on the reactor:
// DESIGN.md), a transport on it, and the handler's end-of-run and error bookkeeping. Handlers run
// inside the reactor's completion loop, so they only record; drive() reports.

#include <chrono>
#include <memory>
#include <string>
#include <system_error>

#include "io/errc.hpp"
#include "io/reactor.hpp"
#include "io/transport.hpp"
#include "tools/vessel_bench/transport_driver.hpp"

namespace vessel::bench {

class driven_end : public io::transport_handler {
 public:
  void on_closed(std::error_code why) override {
    closed_ = true;
    const bool by_us = why == io::make_error_code(io::errc::transport_closed);
    const bool by_peer = why == io::make_error_code(io::errc::connection_closed);
    const bool normal = by_us || (peer_close_is_normal_ && by_peer);
    if (!normal) error_ = "vessel link ended: " + why.message();
  }

 protected:
  /// `peer_close_is_normal`: the peer ends the run by closing (a reactive responder).
  explicit driven_end(bool peer_close_is_normal)
      : reactor_{config()}, peer_close_is_normal_{peer_close_is_normal} {
    if (auto r = reactor_.start(); !r) bench_fail("reactor: " + r.error().message());
  }
  ~driven_end() override = default;

  /// Closes `link`, runs the loop until its on_closed, then stops the reactor. Derived destructors
  /// call it first, while the whole handler is still alive.
  void shutdown(io::transport& link) noexcept {
    link.close();
    while (!closed_) reactor_.run_once(std::chrono::milliseconds{100});
  }

  /// Runs loop turns until `finished()`, which is checked before each turn. No deadline: a timed
  /// wait arms an hrtimer per turn, and a dead peer ends the wait anyway (EOF or a reset).
  template <class Finished>
  void drive(Finished finished) {
    while (!finished()) {
      reactor_.run_once(std::chrono::nanoseconds::max());
      if (!error_.empty()) bench_fail(error_);
      if (closed_) bench_fail("vessel link closed mid-run");
    }
  }

  /// Seconds from `kick()` (which sends the first frames) until drive(finished) returns.
  template <class Kick, class Finished>
  double timed(Kick kick, Finished finished) {
    const auto t0 = clock_type::now();
    kick();
    drive(finished);
    return seconds_since(t0);
  }

  io::reactor reactor_;
  bool closed_ = false;
  std::string error_;  // set by a handler, thrown by drive()

 private:
  static io::reactor_config config() {
    io::reactor_config c;
    c.own_thread = false;  // this thread drives the loop: no hand-off on the measured path
    // busy_poll stays off (the reactor's default): on these 2-core machines a spinning end steals
    // the core its peer needs to reply. SEND_ZC is left to the transport, which never uses it
    // towards a local peer (it halved loopback bandwidth).
    return c;
  }

  bool peer_close_is_normal_;
};

}  // namespace vessel::bench
