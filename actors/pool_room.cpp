#include "actors/pool_room.hpp"

#include <algorithm>
#include <utility>

#include <caf/send.hpp>

namespace vessel::actors {

pool_room::pool_room(io::buffer_pool& pool) : pool_{pool} {
  pool_.set_available_callback([this](std::size_t class_index) { wake(class_index); });
}

pool_room::~pool_room() {
  // Waits for a callback running on another thread: none comes after this.
  pool_.set_available_callback({});
}

bool pool_room::notify_when_free(std::size_t bytes, caf::actor who) {
  const auto class_index = pool_.class_for(bytes);
  if (!class_index || !who) return false;
  {
    const std::lock_guard lock{mutex_};
    waiters_.push_back(waiter{*class_index, std::move(who)});
  }
  // A block that came back between the caller's failed try and the line above fired the
  // callback for nobody. A try now either finds a free block (wake the class at once) or arms
  // the callback again for the next block that comes back.
  if (io::buffer probe = pool_.try_acquire(bytes)) {
    probe = {};
    wake(*class_index);
  }
  return true;
}

std::size_t pool_room::waiting() const {
  const std::lock_guard lock{mutex_};
  return waiters_.size();
}

void pool_room::wake(std::size_t class_index) {
  std::vector<caf::actor> woken;
  {
    const std::lock_guard lock{mutex_};
    auto keep = std::partition(waiters_.begin(), waiters_.end(),
                               [&](const waiter& w) { return w.class_index != class_index; });
    for (auto it = keep; it != waiters_.end(); ++it) woken.push_back(std::move(it->who));
    waiters_.erase(keep, waiters_.end());
  }
  // Outside our lock (the pool's callback lock is held: sending allocates, nothing more).
  for (const caf::actor& who : woken) caf::anon_send(who, pool_room_atom::value);
}

}  // namespace vessel::actors
