#pragma once
// The core of one rank process, without CAF: bootstrap (which launcher), a reactor thread, the
// rendezvous store (served by rank 0), the mesh of peer links, and the matcher that pairs
// arriving messages with posted receives. vessel::comm (the blocking facade) and, later, the CAF
// node stand on it.
//
// Threads: every operation is a caller-owned p2p_request handed over with submit() from any
// thread. Requests cross to the reactor in batches: the first submit into an empty queue posts
// one wake-up, later ones only append, so a burst of small sends costs one hand-off (DESIGN.md,
// "Where the time goes"). Completions run on the reactor thread and end with a futex wake of the
// waiting thread (and, for requests that ask, of events(): one word a thread with many requests
// in flight sleeps on); nothing else crosses back.
//
// Flow control: a send completes when the mesh has accepted the message (its bytes are then the
// link's to resend until acked); when the link pushes back, the request waits in a per-peer
// queue until on_writable, so a blocking sender blocks and memory stays bounded. Received bytes
// are credited back when the matcher says so (actors/message_matcher.hpp).

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "actors/bootstrap.hpp"
#include "actors/caller_progress.hpp"
#include "actors/cpu_binding.hpp"
#include "actors/detailed_error.hpp"
#include "actors/env.hpp"
#include "actors/mesh.hpp"
#include "actors/message_matcher.hpp"
#include "io/buffer_pool.hpp"
#include "io/reactor.hpp"

namespace vessel::actors {

class kv_store_client;
class kv_store_server;
class runtime;

/// One send or receive, owned by the caller until it is done(). Not copyable or movable while
/// submitted. Reusable after done() (reset() first).
class p2p_request {
 public:
  enum class kind : std::uint8_t { send, receive };

  /// A send of `payload` to `dst` with `tag`.
  static void make_send(p2p_request& r, std::uint32_t dst, std::uint64_t tag,
                        io::buffer_slice payload) noexcept;
  /// A send of one message made of `head` then `tail` (mesh::send's split message): the caller
  /// copies a small head (a header) and lends the rest (io::borrowed_memory). To another rank
  /// only; else the send fails with mesh_bad_split.
  static void make_split_send(p2p_request& r, std::uint32_t dst, std::uint64_t tag,
                              io::buffer_slice head, io::buffer_slice tail) noexcept;
  /// A receive from `source` (or any_source) with `tag` (or any_tag).
  static void make_receive(p2p_request& r, std::uint32_t source, std::uint64_t tag) noexcept;
  /// A receive whose message, when it is matched as it begins to arrive (the receive was
  /// posted first) and fits, lands in place: its first `head_bytes` (<= max_head_bytes) bytes in
  /// `head`, the rest in `into`, with no copy through a pool block; `landed` then says so and
  /// `payload` stays empty. A message that does not fit, or that was already waiting, arrives
  /// in `payload` as with make_receive. `into` must stay valid until done().
  static void make_receive_into(p2p_request& r, std::uint32_t source, std::uint64_t tag,
                                std::size_t head_bytes, std::span<std::byte> into) noexcept;
  /// Where a located message's bytes after its head go: `into`, or a block of the pool when it
  /// is empty; with `combine`, folded into `into` as they arrive instead of copied
  /// (wire::body_combiner: a collective's chunk reduced as it lands).
  struct location {
    std::span<std::byte> into;
    wire::body_combiner combine;
  };
  /// Where a message goes, asked when it begins to arrive (make_receive_located): called on the
  /// thread running the reactor's loop with the message's source and its first head_bytes
  /// bytes; returns memory for the rest (exactly the message's length less the head: the
  /// message then lands there and `into` names it), or an empty location for the pool.
  using locate_fn = location (*)(const void* ctx, std::uint32_t source,
                                 std::span<const std::byte> head) noexcept;
  /// As make_receive_into, with the destination chosen per message by `locate(ctx, ...)`: a
  /// receive for any of several messages whose place depends on what they say (a collective's
  /// chunks, whose header names their step). `ctx` must stay valid until done().
  static void make_receive_located(p2p_request& r, std::uint32_t source, std::uint64_t tag,
                                   std::size_t head_bytes, locate_fn locate,
                                   const void* ctx) noexcept;

  p2p_request() = default;
  p2p_request(const p2p_request&) = delete;
  p2p_request& operator=(const p2p_request&) = delete;

  /// True once the runtime finished with the request (acquire: its results are visible).
  bool done() const noexcept { return state_.load(std::memory_order_acquire) == 1; }
  /// Waits until done(). With caller-driven progress (runtime_options::progress) the
  /// waiting thread runs the reactor's loop itself until progress.spin passes with no frame
  /// arriving, then sleeps; otherwise it spins briefly (a reply is often microseconds away), then
  /// sleeps.
  void wait() const noexcept;
  /// As wait(), up to `deadline`; false if still not done.
  bool wait_until(std::chrono::steady_clock::time_point deadline) const noexcept;
  /// As wait(), for about `timeout` (counted from the first clock read of the wait, which a
  /// wait that ends within a few dozen loop turns never makes); false if still not done.
  bool wait_for(std::chrono::steady_clock::duration timeout) const noexcept;
  /// Also signal runtime::events() when this request completes, so that one thread can sleep on
  /// many requests at once (the collectives' driver). Kept across make_send/make_receive.
  void signal_events(bool on) noexcept { signal_events_ = on; }

  // -- What was asked.
  kind what = kind::send;
  std::uint32_t peer = 0;  ///< destination, or the source asked for (may be any_source)
  std::uint64_t tag = 0;   ///< may be any_tag for a receive
  /// send: the bytes to send (kept referenced until the mesh accepted them).
  /// receive: the bytes that arrived (a block of the mesh's pool), once done().
  io::buffer_slice payload;
  /// send: the message's bytes after payload's (make_split_send); empty otherwise.
  io::buffer_slice tail;

  // -- What happened, valid once done().
  std::error_code error;          ///< empty on success
  std::uint32_t source = 0;       ///< receive: who sent it
  std::uint64_t matched_tag = 0;  ///< receive: its tag
  std::uint64_t message_id = 0;   ///< receive: the link's message id; send: ours, per peer
  std::size_t length = 0;         ///< receive: the message's bytes (in payload, or landed)
  bool landed = false;            ///< receive: the message is in head and into, not in payload

  // -- make_receive_into's destination.
  static constexpr std::size_t max_head_bytes = 16;
  static_assert(max_head_bytes <= message_start_bytes, "a landing's head must be seen at its begin");
  std::array<std::byte, max_head_bytes> head{};
  std::size_t head_bytes = 0;
  std::span<std::byte> into;
  bool lands = false;  ///< made by make_receive_into or make_receive_located
  locate_fn locate = nullptr;  ///< make_receive_located's
  const void* locate_ctx = nullptr;

 private:
  friend class runtime;
  void complete(std::error_code ec) noexcept;
  /// The first part of every wait: the caller drives the loop (runtime::drive_until), or spins
  /// briefly when it cannot borrow it. True once done().
  bool drive_or_spin(std::chrono::steady_clock::time_point deadline,
                     std::chrono::steady_clock::time_point* first_look,
                     std::chrono::steady_clock::duration timeout) const noexcept;
  bool sleep_until(std::chrono::steady_clock::time_point deadline) const noexcept;

  // 0 in flight, 1 done, 2 in flight with a sleeper: a futex word, woken only when 2 (a wake
  // is a syscall, and a caller that drives the loop completes its own requests).
  mutable std::atomic<std::uint32_t> state_{0};
  std::atomic<std::uint32_t> cancel_seen_{0};  // set by the reactor once it ran a cancel
  bool signal_events_ = false;
  runtime* events_owner_ = nullptr;  // whose events() to signal, set by submit()
  runtime* runtime_ = nullptr;       // who runs us (set by submit): wait() may drive its loop
  // Reactor thread only.
  receive_id receive_ = 0;
  p2p_request* prev_ = nullptr;  // pending receives, for failing those of a peer gone down
  p2p_request* next_ = nullptr;
  bool pending_ = false;
  bool claimed_ = false;         // its message is landing in place (runtime::claimed_)
  bool cancel_deferred_ = false; // cancelled while claimed: acked once the message settles
};

/// How a runtime starts. Every key with its default; apply_env() reads the VESSEL_* overrides.
struct runtime_options {
  /// Longest wait for the store and every peer link at start-up (VESSEL_CONNECT_TIMEOUT_MS).
  std::chrono::milliseconds connect_timeout{60000};
  /// Bounds of the unexpected-message queue (world_size is set from the bootstrap).
  matcher_config matcher{};
  /// Blocks for outgoing payloads (send copies the caller's bytes into one, once). Kept apart
  /// from the mesh's receive pool so that a sender that fills it cannot starve reassembly.
  /// Block sizes are 2^k + 64 (room for comm's chunk header, see runtime_options::defaults()).
  io::buffer_pool_config send_pool{{{4096 + 64, 1024},
                                    {65536 + 64, 256},
                                    {(std::size_t{1} << 20) + 64, 32},
                                    {(std::size_t{4} << 20) + 64, 8}},
                                   false};
  /// The mesh, less what bootstrap fills in (ranks, token, incarnation).
  mesh_config mesh{};
  io::reactor_config reactor{};
  /// A thread that waits for a request (or for events()) runs the reactor's loop itself instead
  /// of sleeping until the reactor thread wakes it: no thread hand-off on the way of a reply
  /// (VESSEL_PROGRESS, VESSEL_PROGRESS_SPIN_US, VESSEL_YIELD_WHEN_IDLE; caller_progress.hpp).
  /// progress.enabled sets reactor.lendable.
  caller_progress_config progress{};
  /// Binds the process to one core once the ranks on this host are known (actors/cpu_binding):
  /// none for a runtime made directly (tests run several ranks in one process), auto for a rank
  /// process (comm::init()). VESSEL_BIND=auto|core|none.
  cpu_binding bind = cpu_binding::none;

  /// Defaults for a rank: the mesh's receive pool gets a 4 MiB class (the largest message), not
  /// pre-faulted, since eight ranks of a test share one small machine; 64 MiB unexpected bound.
  static runtime_options defaults();
  /// VESSEL_CONNECT_TIMEOUT_MS, VESSEL_UNEXPECTED_BYTES, and the mesh's own
  /// (mesh_config::apply_env).
  detailed_result<void> apply_env(const env_view& env);
};


/// One rank. Created by start(); not movable (the reactor holds pointers into it).
class runtime : private mesh_observer, private credit_sink {
 public:
  /// Bootstraps from `env` (logs which source), loads the token, starts the reactor, serves or
  /// reaches the store, and connects the mesh to every peer. Errors name what failed.
  static detailed_result<std::unique_ptr<runtime>> start(
      const env_view& env, runtime_options options = runtime_options::defaults());
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  std::uint32_t rank() const noexcept { return rank_; }
  std::uint32_t size() const noexcept { return world_; }
  const launch_info& launch() const noexcept { return launch_; }

  /// Any thread. Starts `r`: on this thread when nobody holds the loop (caller-driven progress),
  /// else through the reactor's queue (batched). `r` must stay alive until r.done().
  void submit(p2p_request& r) noexcept;
  /// Any thread but the reactor's. Caller-driven progress for a wait on something other than a
  /// request (a lent buffer coming back): runs the loop here until `done(ctx)`, the
  /// progress.spin budget or `deadline`; false when the loop could not be borrowed. The caller
  /// then waits as it would have anyway.
  bool drive(bool (*done)(const void* ctx), const void* ctx,
             std::chrono::steady_clock::time_point deadline) noexcept;
  /// Any thread but the reactor's. memory.wait_returned(slot), with the loop driven here first:
  /// the acks that return a loan arrive on the loop, and the reactor thread stays parked while
  /// a caller drives.
  void await_returned(io::borrowed_memory& memory, std::uint32_t slot) noexcept;
  /// Any thread. Cancels the receive `r` (a timeout) and returns once the reactor has dealt with
  /// it, so that no reference to `r` is left behind; r.done() then holds, with
  /// comm_errc::receive_cancelled, or with the message if one matched first.
  void cancel(p2p_request& r) noexcept;

  /// A block of at least `bytes` for a send payload; waits while the send pool is exhausted
  /// (backpressure). Empty when `bytes` exceeds the largest block.
  io::buffer acquire_send_block(std::size_t bytes);
  /// The largest payload one message may carry (both pools' largest blocks).
  std::size_t max_message_bytes() const noexcept { return max_message_; }
  /// The bytes of every data frame but a message's last.
  std::size_t fragment_bytes() const noexcept { return fragment_bytes_; }
  /// Whether the link to `peer` runs over shared memory (mesh::reaches_by_shm).
  bool reaches_by_shm(std::uint32_t peer) const noexcept;
  /// Whether any other rank is reached over shared memory (where single-copy reads can go).
  bool reaches_any_by_shm() const noexcept;

  /// Counters of the link to `peer` (runs on the reactor; any thread but the reactor's).
  peer_link_stats link_stats(std::uint32_t peer);
  /// The matcher's counters (same rules).
  matcher_stats matching_stats();

  /// Any thread but the reactor's. Closes the mesh, stops the store and the reactor; requests
  /// still in flight complete with comm_errc::shutting_down. Idempotent; the destructor calls it.
  void shutdown();
  /// Any thread but the reactor's: an orderly end (comm::finalize). First waits until every
  /// link has all it sent acked and has exchanged closing acks with its peer (mesh::drain, for
  /// at most the reconnect deadline plus the liveness deadline: a link still cut by then goes
  /// down anyway), then shutdown().
  void finish();

  /// The store client (apps may use the store too).
  kv_store_client& store() noexcept { return *store_client_; }
  /// Fault injection for tests: closes the connection to `peer` as if the network cut it.
  void drop_connection(std::uint32_t peer);

  /// Any thread. The last state the mesh reported for the link to `peer` (self: up), and how
  /// many times it came back as a new incarnation: what the collectives poll to tell a dead
  /// rank (down) or a restarted one from a link that only reconnects.
  peer_state peer_status(std::uint32_t peer) const noexcept;
  std::uint64_t peer_restarts(std::uint32_t peer) const noexcept;

  /// Any thread. A counter that moves whenever a request with signal_events() completes and
  /// whenever a peer's state changes: a waiter reads it, looks at its requests, and sleeps with
  /// wait_events() until it moves, woken by the completion itself (no polling).
  std::uint32_t events() const noexcept { return events_.load(std::memory_order_seq_cst); }
  /// Sleeps until events() differs from `seen` or `deadline` passes; false on the deadline.
  bool wait_events(std::uint32_t seen, std::chrono::steady_clock::time_point deadline) const noexcept;

 private:
  struct queued {
    p2p_request* request;
    bool cancel;
  };

  explicit runtime(runtime_options options);
  detailed_result<void> boot(const env_view& env);

  // mesh_observer (reactor thread)
  void on_message(inbound_message&& m) override;
  void on_peer_state(std::uint32_t peer, peer_state s, std::error_code why) override;
  void on_writable(std::uint32_t peer) override;
  message_destination on_message_begin(const message_start& m) override;
  void on_message_abandoned(std::uint32_t src, std::uint64_t message_id, bool final) override;
  // credit_sink (reactor thread)
  void release(std::uint32_t source, std::size_t bytes) override;
  void on_backpressure(bool over_bound) override;

  /// Queues `r` for the reactor, posting one flush per batch. False when the reactor is gone: the
  /// queued requests (not cancels) were completed with comm_errc::shutting_down.
  bool enqueue(p2p_request& r, bool cancel) noexcept;
  static void flush_thunk(void* self) noexcept;
  void flush() noexcept;
  /// Loop holder only: runs one queued entry (a send, a receive or a cancel).
  void start_queued(const queued& q) noexcept;
  void start_send(p2p_request& r);
  void start_receive(p2p_request& r);
  /// Claims the message now arriving from r's source for `r`, if `r` is the receive it would
  /// complete: the rest of it lands in r's buffer (mesh::divert). False: `r` waits as usual.
  bool land_in_progress(p2p_request& r);
  /// False when `r` is landing in place: the cancel is acked when its message settles.
  bool cancel_receive(p2p_request& r);
  /// Completes a request claimed by a landing message and acks a cancel deferred on it.
  static void settle_claimed(p2p_request& r, std::error_code ec) noexcept;
  static void ack_cancel(p2p_request& r) noexcept;
  void drain_backlog(std::uint32_t peer);
  void link_pending(p2p_request& r) noexcept;
  void unlink_pending(p2p_request& r) noexcept;
  void fail_everything(std::error_code ec);
  template <class F>
  auto on_reactor(F&& fn) -> decltype(fn());
  /// Caller-driven progress: runs the reactor's loop on this thread until `done()` holds, the
  /// drive_budget runs out (progress.spin with no frame arriving, `deadline`, or `timeout` counted
  /// from the drive's first clock reading, which `first_look` receives when given and the drive
  /// read one), or the reactor stops. False when the loop could not be borrowed (not lendable,
  /// or another thread drives it): the caller then sleeps as usual and the driver's turns
  /// complete its request.
  template <class Done>
  bool drive_until(Done&& done, std::chrono::steady_clock::time_point deadline,
                   std::chrono::steady_clock::time_point* first_look = nullptr,
                   std::chrono::steady_clock::duration timeout =
                       std::chrono::steady_clock::duration::max()) noexcept;

  runtime_options options_;
  launch_info launch_;
  std::uint32_t rank_ = 0;
  std::uint32_t world_ = 1;
  std::size_t max_message_ = 0;
  std::size_t fragment_bytes_ = 0;
  std::atomic<bool> yield_when_idle_{false};  // set once connected (options_.progress)
  std::optional<cluster_token> token_;
  std::string store_file_;  // written by rank 0 (removed at shutdown)

  std::unique_ptr<io::reactor> reactor_;
  std::unique_ptr<kv_store_server> store_server_;  // rank 0
  std::unique_ptr<kv_store_client> store_client_;
  std::unique_ptr<io::buffer_pool> send_pool_;
  std::unique_ptr<mesh> mesh_;
  std::unique_ptr<message_matcher> matcher_;

  // Submission queue: producers append under the lock; the first one into an empty queue posts
  // the flush. The reactor swaps the vectors, so both keep their capacity (no allocation).
  std::mutex queue_mutex_;
  std::vector<queued> incoming_;
  std::vector<queued> draining_;  // reactor thread
  bool flush_posted_ = false;
  // incoming_ is not empty. Set under the mutex; read without it by a submit that holds the
  // loop: with nothing queued it starts its request at once, taking no lock (an 8-byte
  // exchange locks and unlocks the queue four times otherwise).
  std::atomic<bool> queued_{false};

  // Reactor thread only.
  std::vector<std::deque<p2p_request*>> backlog_;  // per peer: sends the link pushed back
  std::vector<std::uint64_t> sent_ids_;            // per peer: our message ids
  std::vector<bool> down_;
  p2p_request* pending_head_ = nullptr;
  std::vector<p2p_request*> claimed_;  // per peer: the receive its landing message fills
  bool closing_ = false;

  // The loop's holder only (submit on a caller's thread holds it too).
  static constexpr unsigned sends_per_turn = 8;
  unsigned sends_since_turn_ = 0;   // submits since the loop last ran a turn
  std::uint64_t turns_seen_ = 0;    // reactor::turns() when counting started

  // Waiters for a send block (the pool's available-callback wakes them).
  std::mutex block_mutex_;
  std::condition_variable block_cv_;
  std::atomic<std::uint32_t> blocks_returned_{0};  // bumped by the pool's available-callback

  std::atomic<bool> shut_down_{false};

  // events(): bumped by completions that asked for it and by on_peer_state; the futex is woken
  // only while someone sleeps on it (a wake is a syscall on every completion otherwise).
  mutable std::atomic<std::uint32_t> events_{0};
  mutable std::atomic<std::uint32_t> event_sleepers_{0};
  friend class p2p_request;
  void signal_events() noexcept;

  // Per peer, written by the reactor in on_peer_state, read by any thread (peer_status()).
  std::unique_ptr<std::atomic<std::uint8_t>[]> peer_states_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> peer_restarts_;
};

}  // namespace vessel::actors
