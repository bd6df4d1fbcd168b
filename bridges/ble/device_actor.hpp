#pragma once
// The device actor of one BLE peripheral: vessel::actors::device_actor (actors/actor_interfaces.hpp)
// over a peripheral engine that runs on the node's reactor, extended by outage watchers and a BLE
// status. Meant to run under a supervisor (make_ble_device_child, node::spawn_supervised): the
// actor fails when the first connect fails, so the supervisor retries it with backoff; once a link
// has been up, link losses are the peripheral's to repair (reconnect with backoff, re-subscribe,
// payload size re-read) and the actor keeps running.
//
// What `command` means:
//  - (call, UUID, {}, timeout)   -> payload: reads characteristic UUID; the reply is its value.
//  - (call, UUID, data, timeout) -> payload: writes `data` with response; the reply is empty, once
//    the peripheral acknowledged.
//  - (send, UUID, data) -> sent: a write without response, answered once BlueZ took it.
//  - (call, "frame", data, timeout) -> payload, vessel frame mode only: `data` travels to the board
//    as a vessel frame (DeviceMessage, kind ble_frame_kind_call, a fresh request id); the reply is
//    the payload of the first frame from the board with that request id.
//  - (send, "frame", data) -> sent: one frame to the board (a serial frame in serial mode, a
//    DeviceMessage of kind ble_frame_kind_send in vessel mode).
//  UUIDs in any form normalize_uuid accepts ("2a19", "0x2A19", 128-bit).
//  Listeners get (frame, "<name>/<uuid>", value) for every notification of the characteristics in
//  ble_device_config::notify, and (frame, "<name>", payload) for every frame from the board that
//  answers no call. Watchers, (blewatch, ble_listener), get a ble_outage when the link goes down
//  and when it is back (a ble_listener also converts to a device_listener for frames).
//
// Errors arrive as caf::error carrying a vessel error (actors::from_caf_error): the ble::errc of
// the failed operation (its detail names device and characteristic), actor_errc::device_timeout
// when the call's own timeout passed first, actor_errc::device_busy when too many calls wait.
// A request in flight when the link drops: GATT operations are resent once by the peripheral,
// else failed with errc::link_lost; a frame call whose frame was already written fails with
// errc::link_lost (its reply may have gone with the link, and the board may have acted on it:
// resending is the caller's decision).
//
// Threads: the actor runs on CAF workers; the bluez_client, peripheral and streams live on the
// reactor thread (work goes there with reactor::dispatch, results come back as messages). The
// D-Bus set-up (bluez_client::open: a few synchronous round trips) runs when the actor starts, on
// its CAF worker, never on the reactor.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>

#include "actors/actor_interfaces.hpp"
#include "actors/supervisor.hpp"
#include "bridges/ble/nus_stream.hpp"
#include "bridges/ble/peripheral.hpp"
#include "io/buffer_pool.hpp"
#include "io/reactor.hpp"

namespace vessel::bridges::ble {

/// What the board link carries on top of the Nordic UART Service, if anything.
enum class ble_frame_mode : std::uint8_t {
  none,    ///< GATT only: calls and sends address characteristics
  serial,  ///< serial frames (wire/serial_frame, the UART bridge's format) over NUS
  vessel,  ///< vessel frames (wire/frame_codec: DeviceMessage headers) over NUS
};

/// DeviceMessage kinds of the vessel frame mode.
inline constexpr std::uint16_t ble_frame_kind_call = 1;   ///< a request; the reply keeps its id
inline constexpr std::uint16_t ble_frame_kind_reply = 2;  ///< what a board answers a call with
inline constexpr std::uint16_t ble_frame_kind_send = 3;   ///< one-way, request id 0

/// The command that addresses the board's frame stream instead of a characteristic.
inline constexpr const char* ble_frame_command = "frame";

/// Every key of a BLE device actor with its default.
struct ble_device_config {
  std::string name = "ble";  ///< names the device to listeners and in logs
  std::string adapter;       ///< "hci0"; empty: the first adapter BlueZ has
  peripheral_config peripheral;
  std::vector<std::string> notify;  ///< characteristics whose notifications go to listeners
  ble_frame_mode frames = ble_frame_mode::none;
  nus_config nus;              ///< the RX/TX pair of the frame modes
  std::uint32_t device_id = 0; ///< vessel mode: DeviceMessage.deviceId of our frames
  std::size_t max_pending_calls = 256;  ///< more waiting calls fail with device_busy
};

/// The link went down (restored == false) or came back.
struct ble_outage {
  std::string device;  ///< ble_device_config::name
  bool restored = false;
  std::chrono::nanoseconds duration{};  ///< on restore: how long the link was down
  std::string reason;
};

/// What a BLE device actor reports beyond device_stats.
struct ble_device_status {
  link_state state = link_state::idle;
  std::size_t payload_size = 0;  ///< ATT MTU - 3 of the current link
  peripheral_counters link;      ///< connects, disconnects, reconnects, notifications, bytes, errors
  std::uint64_t outages = 0;     ///< outage begins seen
  std::uint64_t frames_in = 0;   ///< frames decoded from the board
  std::uint64_t frames_out = 0;  ///< frames written to the board
  std::uint64_t frame_errors = 0;  ///< undecodable bytes from the board (decoder restarted)
  std::uint64_t calls_failed_by_outage = 0;  ///< frame calls failed with link_lost
};

/// Adds a watcher of outages: (watch, ble_listener).
using watch_atom = caf::atom_constant<caf::atom("blewatch")>;
using unwatch_atom = caf::atom_constant<caf::atom("bleunwatch")>;

/// Receives a BLE device's frames and its outages (a device_listener with outages).
using ble_listener = caf::typed_actor<
    caf::reacts_to<actors::frame_atom, std::string, actors::payload>,
    caf::reacts_to<ble_outage>>;

/// A device_actor plus outage watchers and (status) -> ble_device_status.
using ble_device_actor = actors::device_actor::extend<
    caf::reacts_to<watch_atom, ble_listener>, caf::reacts_to<unwatch_atom, ble_listener>,
    caf::replies_to<actors::status_atom>::with<ble_device_status>>;

/// Spawns the actor. `reactor` runs the peripheral (it must outlive the actor by one reactor turn:
/// the node's reactor does); `pool` holds the payloads it hands out.
ble_device_actor spawn_ble_device(caf::actor_system& sys, io::reactor& reactor,
                                  io::buffer_pool& pool, ble_device_config config);

/// A supervisor child that spawns the actor (restarted with a fresh D-Bus connection).
actors::child_spec make_ble_device_child(io::reactor& reactor, io::buffer_pool& pool,
                                         ble_device_config config);

}  // namespace vessel::bridges::ble

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::ble::ble_outage)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vessel::bridges::ble::ble_device_status)
