#pragma once
// The CAF -> reactor direction of the hand-off: actors (any thread) queue sends and credit
// releases; the reactor drains everything queued in one posted work item, so a burst of sends
// from an actor costs one wake-up, not one per message. A send the transport pushes back
// (link_would_block) waits in a per-destination backlog, in order, until on_writable(dst).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "actors/node_transport.hpp"
#include "io/buffer.hpp"
#include "io/reactor.hpp"

namespace vessel::actors {

/// Counters of an outbox (read on the reactor thread).
struct outbox_stats {
  std::uint64_t sends = 0;        ///< sends handed to the transport
  std::uint64_t send_errors = 0;  ///< sends the transport refused for good (logged)
  std::uint64_t pushed_back = 0;  ///< sends that waited for on_writable
  std::uint64_t releases = 0;     ///< credit releases handed to the transport
  std::uint64_t drains = 0;       ///< reactor work items that drained the queue (= wake-ups)
};

class outbox {
 public:
  explicit outbox(io::reactor& r) : reactor_{r} {}
  outbox(const outbox&) = delete;
  outbox& operator=(const outbox&) = delete;

  /// Reactor thread (or before anything is queued): where drained commands go; nullptr drops
  /// them (the node is stopping).
  void set_transport(node_transport* t) noexcept { transport_ = t; }

  /// Any thread. Queues one message; false once the reactor stopped (the message is dropped).
  bool send(std::uint32_t dst, std::uint64_t tag, io::buffer_slice payload);
  /// Any thread. Queues a credit release.
  bool release(std::uint32_t src, std::size_t bytes);

  /// Reactor thread: the transport has room for `dst` again.
  void on_writable(std::uint32_t dst);

  /// Reactor thread.
  outbox_stats stats() const noexcept { return stats_; }

 private:
  struct command {
    bool is_send = true;
    std::uint32_t peer = 0;
    std::uint64_t tag = 0;
    std::size_t bytes = 0;  // release
    io::buffer_slice payload;
  };

  bool enqueue(command c);
  static void drain_thunk(void* self) noexcept;
  void drain();
  void submit(command& c);  // reactor thread

  io::reactor& reactor_;
  node_transport* transport_ = nullptr;
  std::mutex mutex_;
  std::vector<command> incoming_;  // guarded by mutex_
  bool posted_ = false;            // guarded by mutex_
  std::vector<command> draining_;  // reactor thread; swapped with incoming_, keeps capacity
  std::unordered_map<std::uint32_t, std::deque<command>> backlog_;  // reactor thread
  outbox_stats stats_;
};

}  // namespace vessel::actors
