#pragma once
// vessel::collectives::collective_actor: the actor-response form of the collectives (issue 5).
// A typed CAF actor that serves every collective operation of one communicator and answers each
// request when the collective completes: the output bytes, or a caf::error carrying the
// collective's errc and detail (actors::from_caf_error / caf_error_detail read them back, e.g.
// errc::rank_failed with "... rank(s) [3] gone (world rank(s) [3]): link down").
//
// Design (CAF 0.17): the actor never waits. A request becomes a response promise kept in the
// actor's state plus a job handed to a collective_driver (collective_driver.hpp), the one thread
// that drives the communicator (a family of communicators is used from one thread at a time, and
// its wait() blocks: no scheduled actor may call it). The driver starts each job at once,
// advances all of them and sleeps on the runtime's events word, so a completion wakes it without
// polling; it sends the outcome back to the actor as a message, whose handler delivers the
// promise. Many requests are thus in flight at once while the mailbox stays free, and answers
// are matched to requests by a per-actor id. Polling test() from delayed messages instead would
// have cost a CAF worker a wake-up per period per actor and added up to a period of latency to
// every collective; the driver's sleep ends on the completion itself.
//
// Supervision: the driver (and the communicator under it) outlives the actor, so the node's
// supervisor can restart the actor (collective_actor_child) without touching the communicator
// or collectives in flight; an incarnation that ends answers its pending requests with
// actor_errc::node_stopped (their collectives still complete in the driver: every rank must
// run them). A failed collective (errc::rank_failed, timed_out, a bad call) is answered with its
// error and the actor keeps serving.
//
// Every rank must send the same collectives to its actor in the same order (as with the
// blocking calls); buffer shapes per operation: collective_call (collective_driver.hpp).
//
// Example (an actor of the app; `coll` from node.spawn_supervised(collective_actor_child(...))):
//   collective_call c;
//   c.op = collective_op::allreduce; c.type = dtype::float32; c.reduction = reduce_op::sum;
//   c.input = bytes_of(gradients);
//   self->request(coll, caf::infinite, coll_atom::value, std::move(c))
//       .then([](collective_result& r) { use(r.output); },
//             [](caf::error& e) { log(actors::describe(e)); });

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/actor_interfaces.hpp"
#include "actors/supervisor.hpp"
#include "collectives/collective_driver.hpp"

namespace vessel::collectives {

/// (coll, collective_call) -> collective_result: run one collective.
using coll_atom = caf::atom_constant<caf::atom("coll")>;
/// Internal: the driver's outcome of job `id`.
using coll_done_atom = caf::atom_constant<caf::atom("colldone")>;

/// The output of a collective (shape: collective_call).
struct collective_result {
  std::vector<std::byte> output;
};

/// Counters of a collective actor incarnation, and its driver's.
struct collective_actor_stats {
  std::uint64_t requests = 0;  ///< collectives asked of this incarnation
  std::uint64_t answered = 0;  ///< answered with a result
  std::uint64_t errors = 0;    ///< answered with an error
  std::uint64_t pending = 0;   ///< waiting for their collective (now)
  collective_driver_stats driver;
};

/// The collective actor's interface.
///  - (coll, call) -> collective_result, or an error (collectives::errc with detail).
///  - (stats) -> collective_actor_stats.
using collective_actor =
    caf::typed_actor<caf::replies_to<coll_atom, collective_call>::with<collective_result>,
                     caf::replies_to<actors::stats_atom>::with<collective_actor_stats>>;

/// What the actor accepts: the interface plus the driver's outcomes.
using collective_impl_actor =
    collective_actor::extend<caf::reacts_to<coll_done_atom, std::uint64_t, collective_outcome>>;

/// Spawns an actor serving `driver`'s communicator (unsupervised: tests, or apps with their own
/// tree).
collective_actor spawn_collective_actor(caf::actor_system& sys,
                                        std::shared_ptr<collective_driver> driver);

/// The actor as a supervised child (node::spawn_supervised, actors::spawn_supervisor): restarted
/// with the supervisor's backoff over the same driver, escalated when it keeps failing.
actors::child_spec collective_actor_child(std::string name,
                                          std::shared_ptr<collective_driver> driver);

}  // namespace vessel::collectives

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::collectives::collective_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::collectives::collective_outcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::collectives::collective_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::collectives::collective_actor_stats)
