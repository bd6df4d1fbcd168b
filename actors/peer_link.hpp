#pragma once
// The link to one peer: the reliability and flow-control state machines (link_sender,
// link_receiver, link_liveness) driven over whichever authenticated connection is current,
// message fragmentation and in-place reassembly, and the link's timer. Reactor thread only.
//
// A connection comes and goes (mesh_connection); the link outlives it. While none is attached
// the link is connecting or reconnecting: sends queue (bounded) and nothing is lost, since the
// sender keeps every unacked frame and resends from the peer's last_seq_seen after the next
// handshake. Timers: ack delay, heartbeat and silence share ONE timerfd read per link, re-armed
// only when the earliest deadline moves earlier, so the per-message path makes no allocation
// (the reactor's timer_queue allocates per add) and at most one timerfd_settime.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include "actors/handshake.hpp"
#include "actors/link_liveness.hpp"
#include "actors/link_receiver.hpp"
#include "actors/link_sender.hpp"
#include "actors/mesh.hpp"
#include "io/backoff.hpp"
#include "io/io_op.hpp"
#include "io/timer_queue.hpp"
#include "wire/fragmenter.hpp"
#include "wire/frame_header.hpp"
#include "wire/reassembler.hpp"

namespace vessel::actors {

class mesh_connection;

/// One peer's link. Owned by the mesh; reactor thread only.
class peer_link {
 public:
  peer_link(mesh::impl& owner, std::uint32_t peer);
  ~peer_link();
  peer_link(const peer_link&) = delete;
  peer_link& operator=(const peer_link&) = delete;

  std::uint32_t peer() const noexcept { return peer_; }
  peer_state state() const noexcept { return state_; }
  /// True when this side dials the peer (the higher rank dials the lower).
  bool dials() const noexcept;

  /// Queues one message (see mesh::send).
  result<void> send(std::uint64_t tag, io::buffer_slice payload, io::buffer_slice tail = {});
  /// The app released `bytes` of delivered messages (see mesh::release).
  void release(std::size_t bytes);
  /// The message being reassembled into a pool block, if any (see mesh::in_progress).
  std::optional<message_start> in_progress() const;
  /// Moves message `message_id`, being reassembled into a pool block, to `into` (mesh::divert).
  bool divert(std::uint64_t message_id, const message_destination& into);
  peer_link_stats stats() const;

  /// The last_seq_seen our hello carries to a peer of incarnation `peer_incarnation`: ours when
  /// it is the incarnation we know, else 0 (a new stream).
  std::uint64_t resume_point(std::optional<std::uint64_t> peer_incarnation) const noexcept;
  /// The peer's incarnation from the last handshake, if any.
  std::optional<std::uint64_t> known_incarnation() const noexcept { return peer_incarnation_; }

  /// A connection finished its handshake: it becomes the current one (replacing any other),
  /// the sender resumes after the peer's last_seq_seen (or both sides start a new stream when
  /// the incarnation changed), and a fresh credit grant goes out.
  void attach(mesh_connection& c, const handshake_accepted& accepted);
  /// A frame on the attached connection.
  void on_frame(const wire::frame_header& header, std::span<const std::byte> payload);
  /// Where a stream transport may receive the payload of `header` directly: the next data
  /// fragment in order, at its place in the message's destination (io::transport_handler::
  /// payload_destination). A first fragment begins its message here, from the first bytes that
  /// `arrived`, so that it too is received in place. Empty otherwise.
  wire::fragment_place payload_destination(const wire::frame_header& header,
                                           std::span<const std::byte> arrived);
  /// The attached connection has room again.
  void on_writable();
  /// The attached connection ended.
  void on_connection_closed(mesh_connection& c, std::error_code why);

  /// Fault injection: close the current connection as if the network cut it.
  void drop_connection();
  /// Orderly shutdown: no more dialling or timers; closes the connection.
  void close();
  /// Before an orderly close (mesh::drain), called until it says true. Sends every ack owed
  /// now, not after the ack delay; once every frame we sent is acked and no message waits to
  /// go, says so with a closing ack. True once that is so, our closing ack went out and the
  /// peer's came in: neither side needs anything more from the other, even if the connection
  /// drops now (the peer closing first drops it). A link down for good is settled too.
  bool settle();
  /// True when nothing of this link is still in flight on the reactor.
  bool idle() const noexcept;

  /// Called by the mesh once the peer's address is known: starts dialling (if we dial).
  void start();
  /// A dial attempt failed: the next one after a backoff delay, and the peer's record is re-read
  /// from the store (it may have been restarted at another address).
  void dial_failed(std::error_code why);
  /// The mesh read a new record for the peer (a new process published it): dial it now, even
  /// from down (down is final for an incarnation, and this is the next one).
  void address_changed();

 private:
  struct timer_op final : io::io_op {
    explicit timer_op(peer_link& l) : owner{l} {}
    void complete(int res, std::uint32_t) override { owner.on_timer(res); }
    peer_link& owner;
    std::uint64_t expirations = 0;
  };
  // One queued message: fragments [next_fragment, count) still to go to the link_sender.
  struct pending_message {
    std::uint64_t tag = 0;
    std::uint64_t message_id = 0;
    io::buffer_slice payload;
    io::buffer_slice tail;  // the message's bytes after payload's (mesh::send)
    std::uint32_t next_fragment = 0;
  };

  static link_time now() noexcept;
  /// The monotonic clock as of the kernel's last tick (CLOCK_MONOTONIC_COARSE: at most a tick,
  /// 1-10 ms, behind now(), and a fifth of its cost here): enough for liveness, whose deadlines
  /// are heartbeat intervals. Read twice per message otherwise, now() was ~8 % of an 8-byte
  /// ping-pong.
  static link_time coarse_now() noexcept;
  void set_state(peer_state s, std::error_code why = {});
  void pump();
  void transmit();
  bool send_frame(const outgoing_frame& f);
  bool send_control(const wire::frame_header& header);
  void on_data(const wire::frame_header& header, const wire::data_fields& data,
               std::span<const std::byte> payload, link_time t);
  /// Chooses where the message that `data` (its first fragment, `first_bytes` of it arrived)
  /// starts lands, and begins reassembling it there. False when the link failed or is
  /// reconnecting (no pool block).
  bool begin_message(const wire::data_fields& data, std::span<const std::byte> first_bytes);
  /// The message of first fragment `data` was begun when the fragment's header arrived
  /// (payload_destination), and nothing of it has been accepted yet.
  bool begun_on_arrival(const wire::data_fields& data) const noexcept;
  void report_consumed(std::uint64_t bytes);
  void flush_ack(link_time t);
  void arm_timer(link_time deadline);
  void on_timer(int res);
  void service_timer();
  void fail(std::error_code why, const char* what);
  void lost_connection(std::error_code why);
  void go_down(std::error_code why);
  void reset_streams();
  /// The message in progress was landing in the observer's memory: stop writing there and say
  /// so (mesh_observer::on_message_abandoned).
  void abandon_landing(bool final);
  /// Drops the message in progress, keeping the counters that stats() reports.
  void fresh_reassembler();
  void start_dialing();
  void arm_down_poll();

  mesh::impl& owner_;
  std::uint32_t peer_;
  peer_state state_ = peer_state::connecting;
  mesh_connection* connection_ = nullptr;
  bool ever_connected_ = false;
  std::optional<std::uint64_t> peer_incarnation_;
  bool closing_ = false;

  link_sender sender_;
  link_receiver receiver_;
  link_liveness liveness_;
  wire::reassembler reassembler_;
  std::uint64_t fragment_bytes_;

  // Send side: bounded ring of messages not yet wholly given to the sender.
  std::vector<pending_message> queue_;
  std::size_t queue_head_ = 0;
  std::size_t queue_count_ = 0;
  std::uint64_t next_message_id_ = 1;
  bool blocked_ = false;  // a send() was pushed back: on_writable is owed
  bool pumping_ = false;
  std::optional<outgoing_frame> stalled_;  // handed out by the sender, refused by the transport
  std::optional<std::uint64_t> owed_ack_;  // an ack the transport refused
  // The orderly end (settle): we sent our closing ack (said again on each new connection,
  // taken back by our next send); the peer's came (after every ack it owed us).
  bool said_closing_ = false;
  bool peer_closing_ = false;

  // Receive side: the message being reassembled, and the overdraft (see mesh.hpp).
  io::buffer reassembly_block_;
  // The message in progress lands in memory the observer gave (on_message_begin), not a block.
  std::optional<std::uint64_t> landing_message_;
  std::uint64_t reassembly_tag_ = 0;  // the tag of the message being reassembled
  std::uint64_t in_place_before_reset_ = 0;  // reassembler counters of streams before this one
  // Credit (link_credit.hpp) of delivered messages not yet released, and credit reported
  // consumed before the app released it.
  std::uint64_t delivered_unreleased_ = 0;
  std::uint64_t overdraft_ = 0;
  std::uint64_t overdraft_message_ = 0;     // message id that holds the overdraft (0: none)
  // Fragments of the in-progress message charged to the window (it began while another message
  // held the overdraft): handed to the overdraft once that is repaid (release()).
  std::uint64_t in_progress_charged_ = 0;

  // The link timer (timerfd), and the reconnect deadline (reactor timer, cold path).
  int timer_fd_ = -1;
  timer_op timer_op_{*this};
  link_time armed_{link_time::max()};
  std::optional<io::timer_id> reconnect_timer_;
  std::optional<io::timer_id> redial_timer_;
  std::optional<io::timer_id> down_poll_timer_;  // down dialler: re-read the peer's record
  bool revived_ = false;  // down, but the peer republished: dial its next incarnation
  io::backoff backoff_;

  peer_link_stats stats_;
  bool over_release_logged_ = false;
};

}  // namespace vessel::actors
