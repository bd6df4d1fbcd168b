#pragma once
// The CAF -> reactor direction of the hand-off: actors (any thread) queue sends and credit
// releases; the reactor drains everything queued in one posted work item, so a burst of sends
// from an actor costs one wake-up, not one per message. A command queued on the reactor thread
// itself (the node's rank actor runs there) goes to the transport at once, behind whatever other
// threads queued before it. A send the transport pushes back (link_would_block) waits in a
// per-destination backlog, in order, until on_writable(dst).
//
// Bounded: per destination, the bytes and messages of sends that the transport has not accepted
// yet (queued here or in the backlog) are counted. Callers check has_room(dst) before send();
// one that finds no room asks wait_for_room(dst) and gets one room callback (on the reactor
// thread) once the destination drained below half of both bounds. The rank actor parks such
// sends and delays their replies (actor_interfaces.hpp), so a slow link pushes back on the app
// instead of growing this queue.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "actors/node_transport.hpp"
#include "io/buffer.hpp"
#include "io/reactor.hpp"

namespace vessel::actors {

/// Every key of an outbox with its default.
struct outbox_config {
  std::uint32_t world_size = 1;
  /// Per destination: bytes of sends not yet accepted by the transport, past which has_room()
  /// says no.
  std::size_t max_queued_bytes = std::size_t{8} << 20;
  /// Same, counting messages.
  std::size_t max_queued_messages = 1024;
};

/// Counters of an outbox (read on the reactor thread).
struct outbox_stats {
  std::uint64_t sends = 0;        ///< sends handed to the transport
  std::uint64_t send_errors = 0;  ///< sends the transport refused for good (logged)
  std::uint64_t pushed_back = 0;  ///< sends that waited for on_writable
  std::uint64_t releases = 0;     ///< credit releases handed to the transport
  std::uint64_t drains = 0;       ///< reactor work items that drained the queue (= wake-ups)
  std::uint64_t room_calls = 0;   ///< room callbacks made (a waiting caller may go on)
};

class outbox {
 public:
  /// Reactor thread: `dst` has room again (after wait_for_room(dst) returned false).
  using room_callback = std::function<void(std::uint32_t dst)>;

  explicit outbox(io::reactor& r, outbox_config config = {});
  outbox(const outbox&) = delete;
  outbox& operator=(const outbox&) = delete;

  /// Reactor thread (or before anything is queued): where drained commands go; nullptr drops
  /// them (the node is stopping). What was queued before goes to the transport being replaced:
  /// a drain posted from the reactor thread itself runs after work posted from other threads in
  /// the same turn, and a send accepted before the node stopped must not be dropped by it.
  void set_transport(node_transport* t);
  /// Before anything is queued: who hears about room.
  void set_room_callback(room_callback cb) { on_room_ = std::move(cb); }

  /// Any thread. Queues one message; false once the reactor stopped (the message is dropped).
  /// Does not check the bound: callers that respect it check has_room() first.
  bool send(std::uint32_t dst, std::uint64_t tag, io::buffer_slice payload);
  /// Any thread. Queues a credit release (never bounded: it frees memory elsewhere).
  bool release(std::uint32_t src, std::size_t bytes);

  /// Any thread. True while `dst` is under both bounds.
  bool has_room(std::uint32_t dst) const noexcept;
  /// Any thread. Asks for one room callback for `dst` once it is below half of both bounds.
  /// Returns true when it already is (go on now; a callback may still come, ignore it then).
  bool wait_for_room(std::uint32_t dst) noexcept;
  /// Any thread. Bytes and messages queued for `dst` now.
  std::size_t queued_bytes(std::uint32_t dst) const noexcept;
  std::size_t queued_messages(std::uint32_t dst) const noexcept;

  /// Reactor thread: the transport has room for `dst` again.
  void on_writable(std::uint32_t dst);

  /// Reactor thread.
  outbox_stats stats() const noexcept { return stats_; }
  const outbox_config& config() const noexcept { return config_; }

 private:
  struct command {
    bool is_send = true;
    std::uint32_t peer = 0;
    std::uint64_t tag = 0;
    std::size_t bytes = 0;  // release
    io::buffer_slice payload;
  };
  struct destination {  // counters of sends not yet accepted by the transport
    std::atomic<std::size_t> bytes{0};
    std::atomic<std::size_t> messages{0};
    std::atomic<bool> room_wanted{false};
  };

  bool submits_now() const noexcept;
  bool enqueue(command c);
  static void drain_thunk(void* self) noexcept;
  void drain();
  // Reactor thread. `counted`: the send is in the counters already (queued from elsewhere);
  // an uncounted one is counted only if it has to wait in the backlog.
  void submit(command& c, bool counted);
  void count_in(std::uint32_t dst, std::size_t bytes) noexcept;
  void count_out(std::uint32_t dst, std::size_t bytes) noexcept;  // may call on_room_
  bool below_low_water(std::uint32_t dst) const noexcept;

  io::reactor& reactor_;
  outbox_config config_;
  std::unique_ptr<destination[]> destinations_;  // by rank
  node_transport* transport_ = nullptr;
  room_callback on_room_;
  std::mutex mutex_;
  std::vector<command> incoming_;  // guarded by mutex_
  bool posted_ = false;            // guarded by mutex_
  std::atomic<bool> has_incoming_{false};  // set with a push, cleared by a drain (under mutex_)
  std::vector<command> draining_;  // reactor thread; swapped with incoming_, keeps capacity
  bool draining_now_ = false;      // reactor thread: a command enqueued meanwhile waits its turn
  std::unordered_map<std::uint32_t, std::deque<command>> backlog_;  // reactor thread
  std::size_t backlogged_ = 0;  // commands in backlog_, so that an empty one costs no lookup
  outbox_stats stats_;
};

}  // namespace vessel::actors
