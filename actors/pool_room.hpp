#pragma once
// Telling actors that a buffer pool has room again. An app actor that finds the node's pool empty
// (payload::copy_of -> io::errc::pool_exhausted) must wait for the links to give blocks back, as
// the peers ack them. Polling on a CAF timer is the obvious way and a bad one: CAF's timers run
// on a thread of their own, and on a rank bound to one core, where the reactor thread polls, a
// 20 µs delayed_send came 0.7-1.7 ms late (a 64 KiB stream from an actor on the reactor thread
// ran at 1 GB/s, stopping on each retry). The pool knows when a block comes back: this asks it.

#include <cstddef>
#include <mutex>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>

#include "io/buffer_pool.hpp"

namespace vessel::actors {

/// The message an actor waiting for pool room gets (pool_room::notify_when_free).
using pool_room_atom = caf::atom_constant<caf::atom("poolroom")>;

/// Owns `pool`'s available-callback while it lives; `pool` must outlive it.
class pool_room {
 public:
  explicit pool_room(io::buffer_pool& pool);
  ~pool_room();
  pool_room(const pool_room&) = delete;
  pool_room& operator=(const pool_room&) = delete;

  /// Any thread. `who` gets one pool_room_atom once a block that holds `bytes` may be free: when
  /// the pool gets one of that class back, or at once if one is free already (the caller's try
  /// may have failed just before a block came back). A notice may be spurious: try again, and
  /// ask again if the pool is still empty. False (and no notice) when no class holds `bytes`.
  bool notify_when_free(std::size_t bytes, caf::actor who);

  /// Actors waiting now (tests).
  std::size_t waiting() const;

 private:
  struct waiter {
    std::size_t class_index;
    caf::actor who;
  };
  void wake(std::size_t class_index);

  io::buffer_pool& pool_;
  mutable std::mutex mutex_;
  std::vector<waiter> waiters_;
};

}  // namespace vessel::actors
