#pragma once
// How an app actor sends and receives through its node's rank actor without paying for a
// request when it need not. A request and its reply are two mailbox hops (an element each, a
// posted resumption, a dispatch: ~0.35 µs apiece on the machines we measure); for an app
// resident on the rank actor's reactor thread (node::reactor_host()) that is most of what an
// 8-byte send costs. There the port calls the rank actor's direct entry instead
// (rank_direct_entry::try_send, try_receive) whenever the rank actor would answer at once: a
// send its link has room for, a receive whose message is already here. A receive whose message
// is not here yet is posted by the same call and waits in the rank actor as a request's would;
// its result comes back without a message either (receive_waiter): the rank actor hands it to
// the port, and the port's handler runs on the reactor thread between the app's runs, as a reply
// handler would (on_reactor_thread::run_as_handler). Anywhere else, or when the rank actor would
// answer with an error, it is the request it always was, with the same replies and errors.
//
// Order is the rank actor's: while one of this port's send requests is unanswered, later sends
// go as requests too, so that none overtakes it; the same for receives, so that none takes a
// message an earlier receive of this port should get. Receives posted by calls wait in the rank
// actor's order with every other receive. An actor that uses a port sends and receives only
// through it, and keeps it in place for as long as it lives (handlers point at it).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "actors/actor_errc.hpp"
#include "actors/actor_interfaces.hpp"
#include "actors/payload.hpp"
#include "actors/rank_actor.hpp"
#include "actors/reactor_hosted.hpp"

namespace vessel::actors {

class rank_port final : private receive_waiter, private resident_exit_hook {
 public:
  enum class status : std::uint8_t {
    sent,       ///< done now; neither handler runs
    requested,  ///< a request is out; exactly one handler runs with its reply
  };

  rank_port() = default;
  explicit rank_port(rank_actor rank) : rank_{std::move(rank)}, direct_{direct_entry_of(rank_)} {}
  // Handlers and the rank actor's waits point at it.
  rank_port(const rank_port&) = delete;
  rank_port& operator=(const rank_port&) = delete;

  const rank_actor& rank() const noexcept { return rank_; }
  /// True when sends and receives may go as calls (the rank actor runs on a reactor thread).
  bool has_direct_entry() const noexcept { return direct_ != nullptr; }
  /// Sends and receives that went as calls, and as requests.
  std::uint64_t direct_sends() const noexcept { return direct_sends_; }
  std::uint64_t requested_sends() const noexcept { return requested_sends_; }
  std::uint64_t direct_receives() const noexcept { return direct_receives_; }
  std::uint64_t requested_receives() const noexcept { return requested_receives_; }
  /// Receives posted by a call that waited in the rank actor (neither of the above).
  std::uint64_t waited_receives() const noexcept { return waited_receives_; }

  /// From a handler of `self`. `on_sent()` and `on_error(caf::error&)` are the request's
  /// handlers; they never run inside this call, so a loop of sends does not recurse. The error
  /// is for a send the node dropped because its reactor had stopped.
  template <class Self, class OnSent, class OnError>
  caf::expected<status> send(Self* self, std::uint32_t dst, std::uint64_t tag, payload data,
                             OnSent on_sent, OnError on_error) {
    if (direct_ != nullptr && sends_out_ == 0) {
      switch (direct_->try_send(dst, tag, data)) {
        case rank_direct_entry::send_outcome::sent: ++direct_sends_; return status::sent;
        case rank_direct_entry::send_outcome::stopped:
          return to_caf_error(actor_errc::node_stopped, "the node's reactor has stopped");
        case rank_direct_entry::send_outcome::not_taken: break;
      }
    }
    ++sends_out_;
    ++requested_sends_;
    self->request(rank_, caf::infinite, send_atom::value, dst, tag, std::move(data))
        .then(
            [this, on_sent = std::move(on_sent)](sent_atom) mutable {
              --sends_out_;
              on_sent();
            },
            [this, on_error = std::move(on_error)](caf::error& e) mutable {
              --sends_out_;
              on_error(e);
            });
    return status::requested;
  }

  /// From a handler of `self` (or of this port): receives from `source` (or rank_any_source)
  /// with `tag` (or rank_any_tag). A message already here comes back now and neither handler
  /// runs; otherwise the receive waits up to `timeout`, and `on_message(const envelope&)` or
  /// `on_error(caf::error&)` runs with its result (never inside this call): as a handler of
  /// `self` between its runs when `self` is resident beside the rank actor, else as the reply
  /// handler of a request.
  template <class Self, class OnMessage, class OnError>
  std::optional<envelope> receive(Self* self, std::uint32_t source, std::uint64_t tag,
                                  caf::timespan timeout, OnMessage on_message, OnError on_error) {
    // Only an actor resident here has a thread to run handlers on between its runs.
    constexpr bool resident = std::is_base_of_v<reactor_resident, Self>;
    if (direct_ != nullptr && receives_out_ == 0) {
      direct_wait wait;
      if constexpr (resident) {
        wait = {timeout, this, caf::actor_cast<caf::weak_actor_ptr>(self), next_token_};
      }
      std::optional<envelope> got;
      switch (direct_->try_receive(source, tag, wait, got)) {
        case rank_direct_entry::receive_outcome::taken: ++direct_receives_; return got;
        case rank_direct_entry::receive_outcome::waiting:
          if constexpr (resident) {
            if (host_ == nullptr) {
              host_ = self;
              reactor_ = &self->unit().reactor();
              run_in_host_ = &run_in<Self>;
              self->call_at_end(*this);
            }
            waits_.push_back({next_token_++,
                              [on_message = std::move(on_message),
                               on_error = std::move(on_error)](caf::expected<envelope>& r) mutable {
                                if (r)
                                  on_message(*r);
                                else
                                  on_error(r.error());
                              }});
            ++waited_receives_;
          }
          return std::nullopt;
        case rank_direct_entry::receive_outcome::not_taken: break;
      }
    }
    ++receives_out_;
    ++requested_receives_;
    self->request(rank_, caf::infinite, recv_atom::value, source, tag, timeout)
        .then(
            [this, on_message = std::move(on_message)](const envelope& e) mutable {
              --receives_out_;
              on_message(e);
            },
            [this, on_error = std::move(on_error)](caf::error& e) mutable {
              --receives_out_;
              on_error(e);
            });
    return std::nullopt;
  }

 private:
  using completion = std::function<void(caf::expected<envelope>&)>;
  struct waiting_receive {
    std::uint64_t token;
    completion k;
  };
  struct ready_receive {
    std::uint64_t token;
    caf::expected<envelope> result;
  };

  // From the rank actor, on the reactor thread: keeps the result and, unless a run of the
  // handlers is posted already, posts one, holding the app for it.
  void received(std::uint64_t token, caf::expected<envelope> result,
                caf::strong_actor_ptr owner) override {
    ready_.push_back({token, std::move(result)});
    if (held_) return;
    held_ = std::move(owner);
    if (!reactor_->post(io::work_item{&rank_port::run_ready, this})) {
      ready_.clear();  // the reactor stops: the node goes down with the app
      held_.reset();
    }
  }

  static void run_ready(void* port_ptr) noexcept {
    auto& port = *static_cast<rank_port*>(port_ptr);
    auto held = std::move(port.held_);  // let go last: the app may end with it
    // Off the reactor thread this is the reactor's destructor running what it had: the app may
    // run on a CAF worker by now, and what is ready stays for its end.
    if (port.reactor_->is_reactor_thread()) port.run_in_host_(port.host_, port);
  }

  // The app ends: its handlers go, and with them what they hold (its own response promises
  // among them); results that come later find no owner, or one that is ending.
  void resident_ends() noexcept override {
    waits_.clear();
    ready_.clear();
    running_.clear();
  }

  template <class Self>
  static void run_in(void* host, rank_port& port) {
    if (!static_cast<Self*>(host)->run_as_handler([&port] { port.complete_ready(); }))
      port.ready_.clear();  // the app is ending: what came goes where a late reply goes
  }

  // Runs the handlers of the receives that completed, in the order the rank actor completed
  // them; those they post complete in a later run.
  void complete_ready() {
    running_.clear();  // what a handler that threw left: its actor has ended
    std::swap(running_, ready_);
    for (auto& r : running_) {
      auto w = std::find_if(waits_.begin(), waits_.end(),
                            [&](const waiting_receive& x) { return x.token == r.token; });
      if (w == waits_.end()) continue;  // cannot happen: each wait completes once
      auto k = std::move(w->k);
      waits_.erase(w);
      k(r.result);
    }
    running_.clear();
  }

  rank_actor rank_;
  rank_direct_entry* direct_ = nullptr;  // valid while rank_ is held
  std::uint32_t sends_out_ = 0;          // requests not yet answered
  std::uint32_t receives_out_ = 0;
  std::uint64_t direct_sends_ = 0;
  std::uint64_t requested_sends_ = 0;
  std::uint64_t direct_receives_ = 0;
  std::uint64_t requested_receives_ = 0;
  std::uint64_t waited_receives_ = 0;
  // Receives waiting in the rank actor, and those it completed whose handlers have not run.
  std::uint64_t next_token_ = 1;
  std::vector<waiting_receive> waits_;
  std::vector<ready_receive> ready_;
  std::vector<ready_receive> running_;
  caf::strong_actor_ptr held_;  // while a run of the handlers is posted
  void* host_ = nullptr;        // the resident actor, as run_in_host_ takes it
  io::reactor* reactor_ = nullptr;
  void (*run_in_host_)(void*, rank_port&) = nullptr;
};

}  // namespace vessel::actors
