#pragma once
// A scoped actor for code outside the actor system that waits by running the node's loop.
//
// caf::scoped_actor waits for a message on a condition variable, so every reply from the rank
// actor (which runs on the node's reactor thread) is a thread hand-off: a futex wake and, on a
// small machine, a context switch. A send and a receive through the rank actor are a request and
// a reply each, and an 8-byte ping-pong from a scoped actor paid four hand-offs a message: 9-11
// us against 0.7 from an app actor on the reactor thread (docs/io_performance.md).
//
// A driving_scoped_actor borrows the node's reactor loop while it waits (io::reactor::borrow, as
// vessel::comm's waiters do): the rank actor then runs on the waiting thread, and its reply lands
// in a mailbox whose reader is awake. While frames keep arriving the waiter keeps the loop; after
// the node's caller spin with none (node_config::caller_progress) it hands the loop back to the
// reactor thread and sleeps as a scoped_actor does. When the loop cannot be borrowed (caller
// progress off, another thread holds it, the node stopping) it waits as a scoped_actor does.
//
//   vessel::actors::driving_scoped_actor self{node};
//   self->request(node.rank_actor(), caf::infinite, actors::stats_atom::value)
//       .receive([](const actors::rank_stats& s) { ... }, [](caf::error& err) { ... });
//   if (auto err = self.send(node.rank_actor(), dst, tag, std::move(payload))) { ... }
//   caf::expected<actors::envelope> got = self.receive(node.rank_actor(), src, tag, 5s);
//
// send() and receive() do what those two requests do, as calls into the rank actor when the
// loop is this thread's and the rank actor can answer at once (rank_direct_entry, as an app
// actor's rank_port does): a request and its reply are two mailbox elements, a posted
// resumption and two dispatches, most of what an 8-byte message costs once no thread is crossed.
// A receive whose message is not here yet waits in the rank actor in order with every other
// receive, and this thread drives the loop until it completes. Anywhere else they are the
// requests. Do not mix them with requests to the rank actor still unanswered from this actor:
// a call could overtake them.
//
// Like a scoped_actor, it belongs to the thread that made it; that thread must not be a CAF
// worker or the reactor's.

#include <cstdint>

#include <caf/blocking_actor.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_execution_unit.hpp>

#include "actors/actor_interfaces.hpp"

namespace vessel {
class node;
}  // namespace vessel

namespace vessel::actors {

class driving_scoped_actor {
 public:
  /// `n` must outlive this actor. `hide`: not counted among the system's running actors.
  explicit driving_scoped_actor(node& n, bool hide = false);
  ~driving_scoped_actor();
  driving_scoped_actor(const driving_scoped_actor&) = delete;
  driving_scoped_actor& operator=(const driving_scoped_actor&) = delete;

  caf::blocking_actor* operator->() const noexcept { return ptr(); }
  caf::blocking_actor& operator*() const noexcept { return *ptr(); }
  caf::blocking_actor* ptr() const noexcept;
  caf::actor_addr address() const { return ptr()->address(); }

  /// The reply to (send_atom, dst, tag, data) from `rank`: none once sent, else its error.
  caf::error send(const rank_actor& rank, std::uint32_t dst, std::uint64_t tag, payload data);
  /// The reply to (recv_atom, source, tag, timeout) from `rank` (rank_any_source, rank_any_tag).
  caf::expected<envelope> receive(const rank_actor& rank, std::uint32_t source, std::uint64_t tag,
                                  caf::timespan timeout);
  /// Sends and receives that went as calls (the rest went as requests).
  std::uint64_t direct_sends() const noexcept;
  std::uint64_t direct_receives() const noexcept;

  /// Waits that ran the loop, and those that went to sleep on the mailbox (the loop not
  /// borrowed, or handed back after the spin): which way this actor's replies came.
  std::uint64_t driven_waits() const noexcept;
  std::uint64_t sleeping_waits() const noexcept;

 private:
  caf::scoped_execution_unit context_;
  caf::strong_actor_ptr self_;
};

}  // namespace vessel::actors
