#pragma once
// The typed actor interfaces of vessel (caf::typed_actor, CAF 0.17): what a rank, a link and a
// device accept and answer. An app that holds a `rank_actor` handle gets a compile error for a
// message the rank does not understand, or for a reply type it expects wrongly.
//
// Atoms live in vessel::actors and avoid the names CAF predefines (subscribe, get, ok, ...):
// two atoms with the same text are the same type, and a same-named atom beside
// `using namespace caf` is ambiguous (DEPENDENCIES.md 1.2).

#include <cstdint>
#include <string>
#include <system_error>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_actor.hpp>

#include "actors/mesh.hpp"
#include "actors/payload.hpp"

namespace vessel::actors {

// -- atoms (<= 10 characters) ---------------------------------------------------------------

using send_atom = caf::atom_constant<caf::atom("send")>;          ///< send a message / frame
using recv_atom = caf::atom_constant<caf::atom("recv")>;          ///< receive with MPI matching
using stats_atom = caf::atom_constant<caf::atom("stats")>;        ///< counters of an actor
using status_atom = caf::atom_constant<caf::atom("status")>;      ///< state of a link
using listen_atom = caf::atom_constant<caf::atom("listen")>;      ///< add a listener
using unlisten_atom = caf::atom_constant<caf::atom("unlisten")>;  ///< remove a listener
using call_atom = caf::atom_constant<caf::atom("call")>;          ///< device request -> reply
using frame_atom = caf::atom_constant<caf::atom("frame")>;        ///< unsolicited device frame
using sent_atom = caf::atom_constant<caf::atom("sent")>;          ///< a send was accepted

// -- rank -----------------------------------------------------------------------------------

/// A received message with its envelope (MPI: status.source, status.tag).
struct envelope {
  std::uint32_t source = 0;
  std::uint64_t tag = 0;
  std::uint64_t message_id = 0;  ///< per (source, destination), from 1, in send order
  payload data;
};

/// Counters of a rank actor.
struct rank_stats {
  std::uint64_t sends = 0;              ///< sends accepted
  std::uint64_t send_errors = 0;        ///< sends refused (bad rank, too large, pushed back)
  std::uint64_t sends_delayed = 0;      ///< sends whose reply waited for room (backpressure)
  std::uint64_t sends_pushed_back = 0;  ///< sends refused with actor_errc::send_pushed_back
  std::uint64_t sends_waiting = 0;      ///< sends whose reply waits for room (now)
  std::uint64_t received = 0;           ///< messages delivered to a receive
  std::uint64_t receive_timeouts = 0;   ///< receives that expired
  std::uint64_t unexpected = 0;         ///< messages waiting for a matching receive (now)
  std::uint64_t unexpected_bytes = 0;   ///< their bytes (now)
  std::uint64_t credit_withheld = 0;    ///< messages queued past the unexpected bound (total)
  std::uint64_t pending_receives = 0;   ///< receives waiting for a message (now)
  std::uint64_t batches = 0;            ///< hand-offs from the reactor
};

/// Wildcards for a receive (the values of message_matcher's any_source / any_tag).
inline constexpr std::uint32_t rank_any_source = 0xffffffffu;
inline constexpr std::uint64_t rank_any_tag = 0xffffffffffffffffull;

/// The rank: point-to-point messaging of this process.
///  - (send, dst, tag, data) -> sent: queued for dst (self included), in order per destination.
///    Backpressure: the reply is *delayed* while the queue towards dst is full (node_config::
///    outbox bounds: the link is out of credit because dst does not receive, or the connection
///    is being re-dialled), and comes once the queue drained below half. An actor that waits
///    for `sent` before its next send (request(...).then / await) is thus paced by the slowest
///    link, like a blocking MPI_Send, without blocking its thread; one that fires many requests
///    without waiting has them parked (bounded by rank_actor_config::max_waiting_sends per
///    destination), past which the reply is actor_errc::send_pushed_back ("retry later").
///    Other errors: rank out of range, node stopped.
///  - (recv, source | rank_any_source, tag | rank_any_tag, timeout) -> envelope: the oldest
///    matching message, non-overtaking per (source, tag) (actors::message_matcher, MPI's rules;
///    rank_any_tag does not match vessel's reserved tags); actor_errc::receive_timeout when
///    nothing matches in time (timeout zero: only what is already there). Unexpected messages
///    are queued up to a bound, past which their credit is withheld: senders slow down.
///  - (stats) -> rank_stats.
using rank_actor = caf::typed_actor<
    caf::replies_to<send_atom, std::uint32_t, std::uint64_t, payload>::with<sent_atom>,
    caf::replies_to<recv_atom, std::uint32_t, std::uint64_t, caf::timespan>::with<envelope>,
    caf::replies_to<stats_atom>::with<rank_stats>>;

// -- link -----------------------------------------------------------------------------------

/// A state change of the link to a peer, pushed to the link's listeners.
struct link_event {
  std::uint32_t peer = 0;
  peer_state state = peer_state::connecting;
  std::error_code why;  ///< empty for connecting/up
};

/// What a link actor knows about its peer.
struct link_status {
  std::uint32_t peer = 0;
  peer_state state = peer_state::connecting;
  std::error_code last_reason;   ///< of the last reconnecting/restarted/down
  std::uint64_t ups = 0;         ///< times the link came up
  std::uint64_t reconnects = 0;  ///< times it went reconnecting
  std::uint64_t restarts = 0;    ///< new incarnations of the peer seen
  std::uint64_t downs = 0;       ///< times it went down
};

/// Receives a link's events.
using link_listener = caf::typed_actor<caf::reacts_to<link_event>>;

/// The link to one peer: its lifecycle as an actor (the per-frame work runs on the reactor).
///  - (status) -> link_status
///  - (listen, listener) / (unlisten, listener): link_event for every later state change.
using link_actor = caf::typed_actor<caf::replies_to<status_atom>::with<link_status>,
                                    caf::reacts_to<listen_atom, link_listener>,
                                    caf::reacts_to<unlisten_atom, link_listener>>;

// -- device ---------------------------------------------------------------------------------

/// Counters of a device actor.
struct device_stats {
  std::uint64_t calls = 0;         ///< requests answered
  std::uint64_t call_timeouts = 0; ///< requests the device did not answer in time
  std::uint64_t call_errors = 0;   ///< requests answered with an error
  std::uint64_t sends = 0;         ///< one-way frames written
  std::uint64_t unsolicited = 0;   ///< frames from the device that answered no request
  std::uint64_t bytes_out = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t reconnects = 0;    ///< times the device was reopened
  // The line, where the device has one (UART: frames with a good CRC, damaged ones, bytes skipped
  // to find the next frame start, frames sent again by the reliable mode).
  std::uint64_t frames_in = 0;
  std::uint64_t frames_out = 0;
  std::uint64_t crc_errors = 0;
  std::uint64_t resync_bytes = 0;
  std::uint64_t retransmits = 0;
};

/// Receives a device's unsolicited frames: (frame, device name, data).
using device_listener = caf::typed_actor<caf::reacts_to<frame_atom, std::string, payload>>;

/// A device (UART board, BLE peripheral, ...), addressable like any actor.
///  - (call, command, data, timeout) -> payload: a request and its reply. `command` names the
///    operation in the device's own terms (a UART command byte as "0x12", a BLE characteristic
///    UUID, ...). Errors: actor_errc::device_timeout, device_busy, or the transport's error.
///  - (send, command, data) -> sent: a one-way frame.
///  - (listen, listener) / (unlisten, listener): unsolicited frames.
///  - (stats) -> device_stats.
using device_actor = caf::typed_actor<
    caf::replies_to<call_atom, std::string, payload, caf::timespan>::with<payload>,
    caf::replies_to<send_atom, std::string, payload>::with<sent_atom>,
    caf::reacts_to<listen_atom, device_listener>,
    caf::reacts_to<unlisten_atom, device_listener>,
    caf::replies_to<stats_atom>::with<device_stats>>;

}  // namespace vessel::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::actors::envelope)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::actors::rank_stats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::actors::link_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::actors::link_status)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::actors::device_stats)
