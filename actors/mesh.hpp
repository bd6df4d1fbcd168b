#pragma once
// All peer links of one process: the mesh the point-to-point layer, the collectives and the CAF
// node stand on. No CAF here; everything but connect() runs on the reactor thread.
//
// Connection rules: every rank listens (TCP, and an abstract AF_UNIX name for shm peers on the
// same host: host_identity / VESSEL_TRANSPORT); the higher rank dials the lower one, and after a
// drop the dialler re-dials with backoff and jitter. Every connection runs the HMAC handshake
// (actors/handshake.hpp) before any frame of it reaches a link; a refused or stalled peer is
// closed with one log line and a counter (mesh_stats), and nothing it sent is delivered.
//
// Messages: send() cuts a payload into data frames of mesh_config::fragment_bytes (no copy: each
// frame holds a slice of the caller's block); the receiver reassembles them in place into one
// block of its pool, or into memory the observer names (on_message_begin, divert: a receive
// already posted), and hands the whole message to mesh_observer::on_message. Per (src, dst)
// messages arrive once, in order, whatever the connection does (link_sender/link_receiver:
// sequence numbers, cumulative acks, resend after reconnect).
//
// Memory bound (backpressure): per sending peer, a receiver holds at most
//   link window (mesh_config::window_bytes) + one in-progress message (<= max_message_bytes)
// of payload the app has not released. Credit flows back only through release(). A message
// larger than the window still passes: while no other message holds such an overdraft, the
// fragments of a message are counted as consumed as they are copied in (its block is already
// allocated), and the app's later release() of it repays the overdraft before any credit goes
// back. On the send side a link holds at most max_queued_messages messages plus the
// link_sender's max_buffered_bytes of fragments; beyond that send() says link_would_block and
// on_writable(dst) follows.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "actors/auth.hpp"
#include "actors/link_credit.hpp"
#include "actors/detailed_error.hpp"
#include "actors/env.hpp"
#include "actors/host_identity.hpp"
#include "actors/link_liveness.hpp"
#include "actors/link_receiver.hpp"
#include "actors/link_sender.hpp"
#include "io/backoff.hpp"
#include "io/buffer.hpp"
#include "io/buffer_pool.hpp"
#include "io/shm_connector.hpp"
#include "wire/reassembler.hpp"
#include "wire/result.hpp"

namespace vessel::io {
class reactor;
}

namespace vessel::actors {

class kv_store_client;
class peer_link;

/// One whole (reassembled) message.
struct inbound_message {
  std::uint32_t src = 0;
  std::uint64_t tag = 0;
  std::uint64_t message_id = 0;  ///< per (src, dst) link, from 1, in send order
  io::buffer_slice payload;      ///< a block of the mesh's pool; keep it as long as needed
  /// The message went to the destination mesh_observer::on_message_begin gave for it: `payload`
  /// is empty and `length` says how many bytes landed there.
  bool landed = false;
  std::uint64_t length = 0;  ///< landed: the bytes in the destination (else payload.size())
};

/// Bytes of a message's first fragment that mesh_observer::on_message_begin sees at least (all
/// of it, if shorter): a link may begin a message before its first fragment has all arrived.
inline constexpr std::size_t message_start_bytes = 16;

/// VESSEL_SHM_LEND_BYTES unset, where a split copy pays (io::single_copy_rate::pays_split): a
/// fragment part of this many bytes to a same-host peer is lent, read by the peer from our
/// pooled block (and from 64 KiB, while we write its back: io::shm_config::lend_min). Measured
/// on the Intel guest, an app actor's ping-pong through the area against lent: 16 KiB 6.0 µs
/// against 3.0, 32 KiB 8.5 against 4.0, a 64 KiB stream 10.3 GB/s against 14.2; 4 KiB 3.1
/// against 2.5, left to the area, where a stream of small messages costs no system call each
/// (docs/io_performance.md, "Lent payloads").
inline constexpr std::size_t default_shm_lend_bytes = std::size_t{16} << 10;

/// The first fragment of a message is arriving (mesh_observer::on_message_begin).
struct message_start {
  std::uint32_t src = 0;
  std::uint64_t tag = 0;
  std::uint64_t message_id = 0;
  std::uint64_t length = 0;  ///< the whole message's bytes
  /// The first fragment's payload, or at least its first message_start_bytes (valid during the
  /// call; empty for a message already arriving).
  std::span<const std::byte> first_fragment;
};

/// Where a message's bytes go instead of a block of the mesh's pool: its first head.size() bytes
/// into `head`, the rest into `body` (together at least the message's length). Empty: the pool.
/// With `combine`, the body's bytes are folded into `body` as they arrive instead of copied (a
/// chunk reduced as it lands: wire::body_combiner).
struct message_destination {
  std::span<std::byte> head;
  std::span<std::byte> body;
  wire::body_combiner combine;
  bool empty() const noexcept { return head.data() == nullptr && body.data() == nullptr; }
};

/// What a peer link is doing; reported through mesh_observer::on_peer_state.
enum class peer_state : std::uint8_t {
  connecting,    ///< not yet up the first time
  up,            ///< authenticated connection in place, frames flow
  reconnecting,  ///< the connection dropped; frames wait (and are resent) until it is back
  restarted,     ///< the peer came back with a new incarnation: what was in flight to or from
                 ///< its old process is lost; the link starts a new stream (up follows)
  down,          ///< silent past its deadline, not back within the reconnect deadline, a
                 ///< protocol violation, or closed: final for this incarnation
};

/// "connecting", "up", ... for log lines.
const char* to_string(peer_state s) noexcept;

/// Receives what the mesh delivers; every call on the reactor thread.
class mesh_observer {
 public:
  virtual ~mesh_observer() = default;
  /// One whole message. Call mesh::release(src, message_credit(payload.size())) once done with
  /// its bytes (link_credit.hpp; a message to self needs no release but it is harmless).
  virtual void on_message(inbound_message&& m) = 0;
  /// The first fragment of a message arrived: return where its bytes should land (memory that
  /// stays valid until on_message or on_message_abandoned names the message), or nothing for a
  /// block of the pool. One message at a time per peer. Lets a receive posted before its message
  /// arrives take the bytes without a copy out of the pool (the runtime's p2p receives).
  virtual message_destination on_message_begin(const message_start& /*m*/) { return {}; }
  /// A message whose bytes were landing in on_message_begin's destination will not complete:
  /// `final` when the link went down or closed (nothing more comes from this incarnation), else
  /// the peer restarted or broke the stream, and a later message may take the destination's
  /// place. The destination is not written any more.
  virtual void on_message_abandoned(std::uint32_t /*src*/, std::uint64_t /*message_id*/,
                                    bool /*final*/) {}
  /// A peer changed state; `why` is empty for connecting/up.
  virtual void on_peer_state(std::uint32_t peer, peer_state s, std::error_code why) = 0;
  /// After send(peer, ...) said link_would_block: the link has room again.
  virtual void on_writable(std::uint32_t /*peer*/) {}
};

/// Counters of one peer link (reactor thread; monotonic unless said otherwise).
struct peer_link_stats {
  peer_state state = peer_state::connecting;
  std::uint64_t messages_sent = 0;      ///< messages whose last fragment went to the link
  std::uint64_t messages_received = 0;  ///< messages delivered to the observer
  std::uint64_t frames_sent = 0;        ///< data frames handed to a transport (resends included)
  std::uint64_t frames_received = 0;    ///< data frames accepted in order
  std::uint64_t bytes_sent = 0;         ///< their payload bytes
  std::uint64_t bytes_received = 0;
  std::uint64_t retransmits = 0;        ///< frames resent after a reconnect
  std::uint64_t credit_stalls = 0;      ///< times a frame waited for credit or window
  std::uint64_t would_block = 0;        ///< send() calls pushed back
  std::uint64_t duplicates = 0;         ///< frames dropped as already received
  std::uint64_t received_in_place = 0;  ///< data frames the transport received into place
  std::uint64_t combined_on_arrival = 0;  ///< messages folded into place as they arrived
                                         ///< (message_destination::combine: reduced chunks)
  std::uint64_t reconnects = 0;         ///< connections after the first (same incarnation)
  std::uint64_t restarts = 0;           ///< new incarnations of the peer seen
  std::uint64_t heartbeats_sent = 0;
  std::uint64_t heartbeats_received = 0;
  link_time srtt{};                     ///< smoothed RTT from heartbeats (0 before a sample)
  link_time last_rtt{};
  std::uint64_t held_bytes = 0;         ///< delivered, not yet released (current value)
  std::uint64_t buffered_bytes = 0;     ///< send side: payload held until acked (current value)
};

/// Counters of the mesh as a whole (connections that never became a link).
struct mesh_stats {
  std::uint64_t accepted = 0;           ///< inbound connections accepted (TCP and shm)
  std::uint64_t refused = 0;            ///< handshakes refused (bad token, version, rank, ...)
  std::uint64_t handshake_timeouts = 0; ///< peers that stalled past handshake_timeout
  std::uint64_t protocol_errors = 0;    ///< garbage / oversized frames before or after the
                                        ///< handshake (the transport closed with a decode error)
  std::uint64_t dials = 0;              ///< dial attempts started
  std::uint64_t dial_failures = 0;
  std::uint64_t address_reads = 0;      ///< peer records re-read from the store after dial failures
  std::uint64_t address_changes = 0;    ///< ... that named a new address (a restarted peer)
};

/// Which transport a mesh uses to reach its peers.
enum class mesh_transport : std::uint8_t {
  automatic,  ///< shm to a peer on the same host (same hostname and boot id), else tcp
  tcp,
  shm,        ///< every peer by shm (all ranks must be on one host)
};

/// Everything a mesh needs. Every key with its default.
struct mesh_config {
  std::uint32_t self_rank = 0;
  std::uint32_t world_size = 1;
  /// This process's incarnation: differs on every start (e.g. random or a restart counter), so
  /// that peers tell a restart from a reconnect.
  std::uint64_t incarnation = 0;
  /// The cluster token; must outlive the mesh.
  const cluster_token* token = nullptr;
  mesh_transport transport = mesh_transport::automatic;
  /// TCP listen address; port 0 picks an ephemeral port (the one published in the store).
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;
  /// This host, published to peers for the shm decision; empty hostname: read at connect().
  host_identity host;
  /// Prefix of the store keys ("<prefix>/addr/<rank>"): lets several meshes share one store.
  std::string store_prefix = "vessel/mesh";

  /// Payload bytes per data frame (<= the decoder's max_payload_bytes, 1 MiB).
  std::size_t fragment_bytes = 256u << 10;
  /// Link window: payload bytes a peer may have unreleased here (the receiver's credit).
  std::uint64_t window_bytes = 4u << 20;
  /// Messages a link queues on top of what the link_sender holds before send() pushes back.
  std::size_t max_queued_messages = 1024;
  link_sender_config sender{};      ///< initial_credit is overwritten with window_bytes
  link_receiver_config receiver{};  ///< window_bytes is overwritten with window_bytes
  link_liveness_config liveness{};  ///< peer_deadline: silent this long -> down
  /// Two pools of this shape: one for reassembly (what peers send us), one the app fills with
  /// what it sends (mesh::pool()); apart, so that our own unacked sends can never starve the
  /// receive side. The largest block is the largest message.
  io::buffer_pool_config pool = io::buffer_pool_config::defaults();
  io::shm_config shm{};

  /// A peer that connects and has not finished the handshake by then is closed.
  std::chrono::milliseconds handshake_timeout{5000};
  /// A link whose connection dropped goes down if not back within this.
  std::chrono::milliseconds reconnect_deadline{30000};
  /// Longest single dial attempt.
  std::chrono::milliseconds dial_timeout{2000};
  /// Delays between dials (full jitter).
  io::reconnect_policy redial{std::chrono::milliseconds{5}, std::chrono::milliseconds{500}, 2.0,
                              0, true};

  /// Reads VESSEL_PEER_TIMEOUT_MS (liveness.peer_deadline), VESSEL_HEARTBEAT_MS
  /// (liveness.heartbeat_interval), VESSEL_RECONNECT_TIMEOUT_MS (reconnect_deadline),
  /// VESSEL_HANDSHAKE_TIMEOUT_MS (handshake_timeout and shm.handshake_timeout),
  /// VESSEL_SHM_LEND_BYTES (shm.lend_min; unset: default_shm_lend_bytes where a split copy pays
  /// here, io/single_copy_probe.hpp, else 0) and VESSEL_TRANSPORT into this config; a malformed
  /// value is an error naming the variable.
  detailed_result<void> apply_env(const env_view& env);
  /// One line per key, for the start-up log.
  std::string to_string() const;
};

/// All peer links of this process. Not copyable or movable (the reactor holds pointers into it).
/// Destroy only after close() returned (the destructor calls it), and before the reactor stops.
class mesh {
 public:
  /// Allocates the pool and one link per peer; nothing runs until connect(). `r` must be
  /// started and driven by its own thread; `observer` must outlive the mesh.
  mesh(io::reactor& r, mesh_config config, mesh_observer& observer);
  ~mesh();
  mesh(const mesh&) = delete;
  mesh& operator=(const mesh&) = delete;

  /// App thread only (NOT the reactor thread): starts listening, publishes this rank's
  /// addresses to `store`, reads every peer's, dials the lower ranks and accepts the higher ones,
  /// and blocks until every link is up or `deadline` passes; the error then names the peers
  /// still missing and why. Links keep trying after a failed connect (close() stops them).
  /// `store` may go once connect returns: when a peer we dial cannot be reached, a worker thread
  /// re-reads its record through a client of its own to the same address (a restarted peer
  /// publishes a new one; see peer_link::address_changed).
  detailed_result<void> connect(kv_store_client& store, std::chrono::milliseconds deadline);

  /// Reactor thread only. Queues one message to `dst` (self included: delivered locally, later
  /// on this thread, never from inside send). The payload is not copied: its block stays
  /// referenced until every fragment is acked. Errors: link_would_block (queue full; on_writable
  /// follows), mesh_message_too_large (over max_message_bytes), mesh_peer_down, mesh_closed,
  /// rank_out_of_range.
  /// A non-empty `tail` follows `payload` in the same message (the receiver sees one message of
  /// both): a sender copies a small head (a header) and lends the bulk without copying it. A
  /// fragment that straddles the two goes out in two parts (transport::send_parts). `dst` must
  /// be another rank (mesh_bad_split).
  result<void> send(std::uint32_t dst, std::uint64_t tag, io::buffer_slice payload,
                    io::buffer_slice tail = {});
  /// The bytes of every data frame but a message's last (mesh_config::fragment_bytes).
  std::size_t fragment_bytes() const noexcept { return config_.fragment_bytes; }
  /// Once connect() has read every peer's record: the ranks on this host, this one included.
  std::uint32_t ranks_on_this_host() const noexcept { return ranks_on_host_; }
  /// And this rank's place among them (0 for the lowest rank on the host).
  std::uint32_t rank_on_this_host() const noexcept { return rank_on_host_; }
  /// Once connect() has read every peer's record: whether the link to `peer` runs over shared
  /// memory (a peer on this host whose memory a rank may read: actors' single-copy sends).
  bool reaches_by_shm(std::uint32_t peer) const noexcept {
    return peer < by_shm_.size() && by_shm_[peer];
  }

  /// Reactor thread only: the app is done with messages from `src` whose credit adds up to
  /// `credit` (message_credit() of each one's bytes, link_credit.hpp; any split of what was
  /// delivered, e.g. one call per message). Credit goes back to the sender only through this.
  /// Releasing more than was delivered is ignored (logged once).
  void release(std::uint32_t src, std::size_t credit);

  /// Reactor thread only. The message from `src` whose fragments are arriving into a pool block
  /// (begun, not complete, not landing in an observer's destination), if any.
  std::optional<message_start> in_progress(std::uint32_t src) const;
  /// Reactor thread only. Moves that message (`message_id` from `src`) to `into`, as if
  /// on_message_begin had returned it: what arrived is copied there, the rest is written there,
  /// and on_message / on_message_abandoned follow as for a landing message. False when that
  /// message is no longer in progress or `into` is too small.
  bool divert(std::uint32_t src, std::uint64_t message_id, const message_destination& into);

  /// Reactor thread only. Counters of the link to `peer` (self: zeros).
  peer_link_stats stats(std::uint32_t peer) const;
  /// Reactor thread only.
  mesh_stats totals() const noexcept { return stats_; }
  /// Reactor thread only. State of the link to `peer` (self: up).
  peer_state state(std::uint32_t peer) const;

  /// Reactor thread only. Fault injection: closes `peer`'s transport as if the network cut it.
  /// The link goes reconnecting and the dialler side re-dials.
  void drop_connection(std::uint32_t peer);

  /// Any thread but the reactor's: orderly shutdown. Stops listening and dialling, closes every
  /// transport (peers see their link drop, then down after their reconnect deadline) and waits
  /// until every operation on the reactor has completed. Idempotent.
  void close();
  /// Any thread but the reactor's, before close() on an orderly end (comm::finalize): waits
  /// until every link is settled (peer_link::settle: all it sent acked, nothing queued, and
  /// closing acks exchanged with the peer) or down, for at most `limit`; a link reconnecting
  /// meanwhile resends as usual. Without it, close() drops frames still unacked: a message sent just before the end
  /// (the last barrier's) is lost when the connection it went out on dies before delivering it.
  /// False when `limit` passed first (the links still unsettled are logged).
  bool drain(std::chrono::milliseconds limit);

  /// The send pool (mesh_config::pool): blocks for payloads the app sends (any thread may
  /// acquire; see io::buffer_pool). A block from another pool works too.
  io::buffer_pool& pool() noexcept;
  /// Largest message send() accepts: the receive pool's largest block.
  std::size_t max_message_bytes() const noexcept;
  /// The TCP port this mesh listens on (valid once connect() started listening).
  std::uint16_t listen_port() const noexcept;
  const mesh_config& config() const noexcept { return config_; }
  io::reactor& reactor() noexcept { return reactor_; }

  /// The inside (actors/mesh_impl.hpp): shared by peer_link and mesh_connection, not for apps.
  struct impl;

 private:

  io::reactor& reactor_;
  mesh_config config_;
  std::uint32_t ranks_on_host_ = 1;  // connect() counts them
  std::uint32_t rank_on_host_ = 0;   // and the ones below this rank
  std::vector<bool> by_shm_;         // [rank]: its record said shm (connect())
  mesh_observer& observer_;
  mesh_stats stats_;
  std::unique_ptr<impl> impl_;
};

}  // namespace vessel::actors
