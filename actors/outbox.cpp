#include "actors/outbox.hpp"

#include <algorithm>

#include "actors/errc.hpp"
#include "io/log.hpp"

namespace vessel::actors {

outbox::outbox(io::reactor& r, outbox_config config)
    : reactor_{r},
      config_{config},
      destinations_{std::make_unique<destination[]>(std::max<std::uint32_t>(1, config.world_size))} {
  config_.world_size = std::max<std::uint32_t>(1, config_.world_size);
}

bool outbox::send(std::uint32_t dst, std::uint64_t tag, io::buffer_slice payload) {
  command c{true, dst, tag, 0, std::move(payload)};
  if (submits_now()) {
    // Uncounted: a send the transport takes now never waited, and counting it in and out costs
    // four atomic updates, a few per cent of a hosted 8-byte message (submit counts what waits).
    drain();
    submit(c, false);
    return true;
  }
  if (dst < config_.world_size) count_in(dst, c.payload.size());
  return enqueue(std::move(c));
}

bool outbox::release(std::uint32_t src, std::size_t bytes) {
  return enqueue(command{false, src, 0, bytes, {}});
}

bool outbox::has_room(std::uint32_t dst) const noexcept {
  if (dst >= config_.world_size) return true;  // the transport refuses it, nothing queues
  const auto& d = destinations_[dst];
  return d.bytes.load() < config_.max_queued_bytes &&
         d.messages.load() < config_.max_queued_messages;
}

bool outbox::below_low_water(std::uint32_t dst) const noexcept {
  const auto& d = destinations_[dst];
  return d.bytes.load() <= config_.max_queued_bytes / 2 &&
         d.messages.load() <= config_.max_queued_messages / 2;
}

bool outbox::wait_for_room(std::uint32_t dst) noexcept {
  if (dst >= config_.world_size) return true;
  // Flag first, then look (both seq_cst, as count_out's decrement and exchange): either this
  // check sees the drained counters, or count_out sees the flag and calls back.
  destinations_[dst].room_wanted.store(true);
  return below_low_water(dst);
}

std::size_t outbox::queued_bytes(std::uint32_t dst) const noexcept {
  return dst < config_.world_size ? destinations_[dst].bytes.load() : 0;
}

std::size_t outbox::queued_messages(std::uint32_t dst) const noexcept {
  return dst < config_.world_size ? destinations_[dst].messages.load() : 0;
}

void outbox::count_in(std::uint32_t dst, std::size_t bytes) noexcept {
  auto& d = destinations_[dst];
  d.bytes.fetch_add(bytes);
  d.messages.fetch_add(1);
}

void outbox::count_out(std::uint32_t dst, std::size_t bytes) noexcept {
  if (dst >= config_.world_size) return;
  auto& d = destinations_[dst];
  d.bytes.fetch_sub(bytes);
  d.messages.fetch_sub(1);
  if (below_low_water(dst) && d.room_wanted.load() && d.room_wanted.exchange(false) && on_room_) {
    ++stats_.room_calls;
    on_room_(dst);
  }
}

bool outbox::submits_now() const noexcept {
  // From the loop's own thread (the rank actor hosted there): submitted now, behind whatever
  // other threads queued, instead of a posted drain one loop turn later.
  // The thread first: transport_ and draining_now_ are the reactor thread's alone.
  return reactor_.is_reactor_thread() && transport_ != nullptr && !draining_now_;
}

bool outbox::enqueue(command c) {
  if (submits_now()) {
    drain();
    submit(c, true);
    return true;
  }
  bool post = false;
  {
    const std::lock_guard lock{mutex_};
    incoming_.push_back(std::move(c));
    post = !posted_;
    posted_ = true;
    has_incoming_.store(true, std::memory_order_release);
  }
  // Only the first command since the last drain wakes the reactor.
  if (post && !reactor_.post(io::work_item{&outbox::drain_thunk, this})) {
    std::vector<command> dropped;
    {
      const std::lock_guard lock{mutex_};
      posted_ = false;
      dropped.swap(incoming_);
    }
    for (auto& d : dropped) {
      if (d.is_send && d.peer < config_.world_size) {
        destinations_[d.peer].bytes.fetch_sub(d.payload.size());
        destinations_[d.peer].messages.fetch_sub(1);
      }
    }
    return false;
  }
  return true;
}

void outbox::set_transport(node_transport* t) {
  if (transport_ != nullptr) drain();
  transport_ = t;
}

void outbox::drain_thunk(void* self) noexcept {
  auto* out = static_cast<outbox*>(self);
  ++out->stats_.drains;
  out->drain();
}

void outbox::drain() {
  // The reactor thread's own sends drain first, mostly to find nothing: without the lock then.
  if (!has_incoming_.load(std::memory_order_acquire)) return;
  {
    const std::lock_guard lock{mutex_};
    draining_.swap(incoming_);
    posted_ = false;
    has_incoming_.store(false, std::memory_order_relaxed);
  }
  draining_now_ = true;
  for (auto& c : draining_) submit(c, true);
  draining_.clear();
  draining_now_ = false;
}

void outbox::submit(command& c, bool counted) {
  if (!c.is_send) {
    if (transport_ == nullptr) return;
    ++stats_.releases;
    transport_->release(c.peer, c.bytes);
    return;
  }
  const std::size_t bytes = c.payload.size();
  if (transport_ == nullptr) {  // stopping: dropped
    if (counted) count_out(c.peer, bytes);
    return;
  }
  const auto wait = [&] {
    if (!counted && c.peer < config_.world_size) count_in(c.peer, bytes);
    backlog_[c.peer].push_back(std::move(c));
    ++backlogged_;
  };
  if (backlogged_ > 0) {
    if (auto it = backlog_.find(c.peer); it != backlog_.end() && !it->second.empty()) {
      return wait();  // keep order behind what already waits
    }
  }
  auto r = transport_->send(c.peer, c.tag, c.payload);
  if (r) {
    ++stats_.sends;
  } else if (r.error() == errc::link_would_block) {
    ++stats_.pushed_back;
    return wait();  // still queued: counted until the transport takes it
  } else {
    ++stats_.send_errors;
    log::get("actors").warn("send to rank {} tag {} ({} bytes) refused: {}", c.peer, c.tag,
                            bytes, r.error().message());
  }
  c.payload = {};
  if (counted) count_out(c.peer, bytes);
}

void outbox::on_writable(std::uint32_t dst) {
  auto it = backlog_.find(dst);
  if (it == backlog_.end() || transport_ == nullptr) return;
  auto& waiting = it->second;
  while (!waiting.empty()) {
    auto r = transport_->send(dst, waiting.front().tag, waiting.front().payload);
    if (!r && r.error() == errc::link_would_block) return;  // on_writable comes again
    if (r) {
      ++stats_.sends;
    } else {
      ++stats_.send_errors;
      log::get("actors").warn("send to rank {} refused: {}", dst, r.error().message());
    }
    const std::size_t bytes = waiting.front().payload.size();
    waiting.pop_front();
    --backlogged_;
    count_out(dst, bytes);
  }
}

}  // namespace vessel::actors
