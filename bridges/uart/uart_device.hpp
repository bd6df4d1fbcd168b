#pragma once
// The device actor of a UART board: implements actors::device_actor (actor_interfaces.hpp) over a
// uart_link that runs on the node's reactor. The per-byte work (framing, acks, retransmits,
// matching replies) stays on the reactor; the actor sees completed replies, events and state
// changes, one message each.
//
// Supervision: each incarnation opens the port anew. When the port disappears (USB unplugged) and
// is not back within `unplug_grace`, or cannot be opened at start, the actor fails with the
// reason (errc::device_unplugged, ENOENT, ...), so that its supervisor restarts it with backoff;
// a restart that finds the port back reopens it. Every request the actor accepted is answered:
// with its reply, or with a typed error (below) when it fails or the actor ends; none is dropped.
// Calls in flight across an unplug shorter than `unplug_grace` are resent by the link (retried).
//
//   (call, "0x01", data, timeout) -> payload: the reply body. `command` is the command byte,
//       "0x01" or "1". Errors (caf::error, map back with actors::from_caf_error):
//       actor_errc::device_timeout (no reply in time), actor_errc::device_busy (the board said
//       busy, or every call slot is taken), uart::errc::device_unplugged (the device went away
//       meanwhile), bad_command, message_too_large, unknown_command, bad_request, device_error,
//       link_closed (the actor ended), or the open error of the port.
//   (send, "0x01", data) -> sent: queued on the line (reliable mode: delivered exactly once while
//       the board stays up).
//   (listen, l) / (unlisten, l): every unsolicited message as (frame, name, topic | body).
//   (stats) -> device_stats: counters across every incarnation of this device.

#include <chrono>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/actor_interfaces.hpp"
#include "actors/supervisor.hpp"
#include "bridges/uart/uart_link.hpp"
#include "io/buffer_pool.hpp"
#include "io/reactor.hpp"

namespace vessel::bridges::uart {

/// One board as a device actor. Every key with its default.
struct uart_device_config {
  std::string name = "uart";  ///< the device's name: in listeners' frames, logs, errors, child names
  uart_link_config link;      ///< the port, baud, reliable mode (link.reopen is used within the grace)
  /// How long an unplugged port may stay away before the actor fails (0: fail at once). Within it,
  /// the link reopens the port itself and resends the calls in flight.
  std::chrono::milliseconds unplug_grace{0};
  /// The supervisor of supervised_uart_device(): name "uart/<name>", restarts 20 ms doubling to
  /// 1 s, and so many restarts allowed that a board unplugged for hours is still picked up.
  actors::supervisor_config supervision = default_supervision();

  static actors::supervisor_config default_supervision();
};

/// Parses a command as the device_actor interface names it: "0x01", "1" (0..127).
result<std::uint8_t> parse_command(std::string_view text) noexcept;

/// A child that starts the device actor; every start (a restart too) opens the port anew. The
/// reactor and the pool (reply bodies) must outlive the supervisor that holds it (a node's do).
actors::child_spec uart_device_child(io::reactor& reactor, io::buffer_pool& pool,
                                     uart_device_config config);

/// The device under a supervisor of its own, "uart/<name>" (config.supervision), whose child is
/// named config.name: add it with node::spawn_supervised(); find the current incarnation with
/// current_uart_device().
actors::child_spec supervised_uart_device(io::reactor& reactor, io::buffer_pool& pool,
                                          uart_device_config config);

/// The device's current incarnation, asked of its supervisor (blocking, for apps and tests);
/// invalid while it waits for a restart or when `timeout` passes.
actors::device_actor current_uart_device(caf::actor_system& sys, const caf::actor& supervisor,
                                         const std::string& name,
                                         std::chrono::milliseconds timeout = std::chrono::seconds{5});

}  // namespace vessel::bridges::uart
