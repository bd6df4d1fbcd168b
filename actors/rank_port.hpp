#pragma once
// How an app actor sends through its node's rank actor without paying for the request when it
// need not. A send request and its reply are two mailbox hops (an element each, a posted
// resumption, a dispatch: ~0.35 µs apiece on the machines we measure); for an app resident on
// the rank actor's reactor thread (node::reactor_host()) that is most of what an 8-byte send
// costs. There the port calls the rank actor's direct entry instead (rank_direct_entry::try_send)
// whenever the send would be answered at once; anywhere else, or when the destination's link is
// full, it is the request it always was, with the same replies and errors.
//
// Order per destination and tag is the rank actor's: while one of this port's requests is
// unanswered, later sends go as requests too, so that none overtakes it. An actor that sends
// through a port sends only through it, and keeps it in place (its reply handlers point at it).

#include <cstdint>
#include <utility>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "actors/actor_errc.hpp"
#include "actors/actor_interfaces.hpp"
#include "actors/payload.hpp"
#include "actors/rank_actor.hpp"

namespace vessel::actors {

class rank_port {
 public:
  enum class status : std::uint8_t {
    sent,       ///< done now; neither handler runs
    requested,  ///< a request is out; exactly one handler runs with its reply
  };

  rank_port() = default;
  explicit rank_port(rank_actor rank) : rank_{std::move(rank)}, direct_{direct_entry_of(rank_)} {}

  const rank_actor& rank() const noexcept { return rank_; }
  /// True when sends may go as calls (the rank actor is resident on a reactor thread).
  bool has_direct_entry() const noexcept { return direct_ != nullptr; }
  /// Sends that went as calls, and as requests.
  std::uint64_t direct_sends() const noexcept { return direct_sends_; }
  std::uint64_t requested_sends() const noexcept { return requested_sends_; }

  /// From a handler of `self`. `on_sent()` and `on_error(caf::error&)` are the request's
  /// handlers; they never run inside this call, so a loop of sends does not recurse. The error
  /// is for a send the node dropped because its reactor had stopped.
  template <class Self, class OnSent, class OnError>
  caf::expected<status> send(Self* self, std::uint32_t dst, std::uint64_t tag, payload data,
                             OnSent on_sent, OnError on_error) {
    if (direct_ != nullptr && requests_out_ == 0) {
      switch (direct_->try_send(dst, tag, data)) {
        case rank_direct_entry::send_outcome::sent: ++direct_sends_; return status::sent;
        case rank_direct_entry::send_outcome::stopped:
          return to_caf_error(actor_errc::node_stopped, "the node's reactor has stopped");
        case rank_direct_entry::send_outcome::not_taken: break;
      }
    }
    ++requests_out_;
    ++requested_sends_;
    self->request(rank_, caf::infinite, send_atom::value, dst, tag, std::move(data))
        .then(
            [this, on_sent = std::move(on_sent)](sent_atom) mutable {
              --requests_out_;
              on_sent();
            },
            [this, on_error = std::move(on_error)](caf::error& e) mutable {
              --requests_out_;
              on_error(e);
            });
    return status::requested;
  }

 private:
  rank_actor rank_;
  rank_direct_entry* direct_ = nullptr;  // valid while rank_ is held
  std::uint32_t requests_out_ = 0;
  std::uint64_t direct_sends_ = 0;
  std::uint64_t requested_sends_ = 0;
};

}  // namespace vessel::actors
