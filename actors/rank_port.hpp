#pragma once
// How an app actor sends and receives through its node's rank actor without paying for a
// request when it need not. A request and its reply are two mailbox hops (an element each, a
// posted resumption, a dispatch: ~0.35 µs apiece on the machines we measure); for an app
// resident on the rank actor's reactor thread (node::reactor_host()) that is most of what an
// 8-byte send costs. There the port calls the rank actor's direct entry instead
// (rank_direct_entry::try_send, try_receive) whenever the rank actor would answer at once: a
// send its link has room for, a receive whose message is already here. Anywhere else, or when
// it would not, it is the request it always was, with the same replies and errors.
//
// Order is the rank actor's: while one of this port's send requests is unanswered, later sends
// go as requests too, so that none overtakes it; the same for receives, so that none takes a
// message an earlier receive of this port should get. An actor that uses a port sends and
// receives only through it, and keeps it in place (its reply handlers point at it).

#include <cstdint>
#include <optional>
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
  /// True when sends and receives may go as calls (the rank actor runs on a reactor thread).
  bool has_direct_entry() const noexcept { return direct_ != nullptr; }
  /// Sends and receives that went as calls, and as requests.
  std::uint64_t direct_sends() const noexcept { return direct_sends_; }
  std::uint64_t requested_sends() const noexcept { return requested_sends_; }
  std::uint64_t direct_receives() const noexcept { return direct_receives_; }
  std::uint64_t requested_receives() const noexcept { return requested_receives_; }

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

  /// From a handler of `self`: receives from `source` (or rank_any_source) with `tag` (or
  /// rank_any_tag). A message already here comes back now and neither handler runs; otherwise
  /// the receive goes as a request that waits up to `timeout`, and `on_message(const envelope&)`
  /// or `on_error(caf::error&)` runs with its reply (never inside this call).
  template <class Self, class OnMessage, class OnError>
  std::optional<envelope> receive(Self* self, std::uint32_t source, std::uint64_t tag,
                                  caf::timespan timeout, OnMessage on_message, OnError on_error) {
    if (direct_ != nullptr && receives_out_ == 0) {
      if (auto got = direct_->try_receive(source, tag)) {
        ++direct_receives_;
        return got;
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
  rank_actor rank_;
  rank_direct_entry* direct_ = nullptr;  // valid while rank_ is held
  std::uint32_t sends_out_ = 0;          // requests not yet answered
  std::uint32_t receives_out_ = 0;
  std::uint64_t direct_sends_ = 0;
  std::uint64_t requested_sends_ = 0;
  std::uint64_t direct_receives_ = 0;
  std::uint64_t requested_receives_ = 0;
};

}  // namespace vessel::actors
