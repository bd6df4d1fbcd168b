#include "actors/outbox.hpp"

#include "actors/errc.hpp"
#include "io/log.hpp"

namespace vessel::actors {

bool outbox::send(std::uint32_t dst, std::uint64_t tag, io::buffer_slice payload) {
  return enqueue(command{true, dst, tag, 0, std::move(payload)});
}

bool outbox::release(std::uint32_t src, std::size_t bytes) {
  return enqueue(command{false, src, 0, bytes, {}});
}

bool outbox::enqueue(command c) {
  bool post = false;
  {
    const std::lock_guard lock{mutex_};
    incoming_.push_back(std::move(c));
    post = !posted_;
    posted_ = true;
  }
  // Only the first command since the last drain wakes the reactor.
  if (post && !reactor_.post(io::work_item{&outbox::drain_thunk, this})) {
    const std::lock_guard lock{mutex_};
    posted_ = false;
    incoming_.clear();
    return false;
  }
  return true;
}

void outbox::drain_thunk(void* self) noexcept { static_cast<outbox*>(self)->drain(); }

void outbox::drain() {
  {
    const std::lock_guard lock{mutex_};
    draining_.swap(incoming_);
    posted_ = false;
  }
  ++stats_.drains;
  for (auto& c : draining_) submit(c);
  draining_.clear();
}

void outbox::submit(command& c) {
  if (transport_ == nullptr) return;
  if (!c.is_send) {
    ++stats_.releases;
    transport_->release(c.peer, c.bytes);
    return;
  }
  auto& waiting = backlog_[c.peer];
  if (!waiting.empty()) {  // keep order behind what already waits
    waiting.push_back(std::move(c));
    return;
  }
  auto r = transport_->send(c.peer, c.tag, c.payload);
  if (r) {
    ++stats_.sends;
  } else if (r.error() == errc::link_would_block) {
    ++stats_.pushed_back;
    waiting.push_back(std::move(c));
  } else {
    ++stats_.send_errors;
    log::get("actors").warn("send to rank {} tag {} ({} bytes) refused: {}", c.peer, c.tag,
                            c.payload.size(), r.error().message());
  }
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
    waiting.pop_front();
  }
}

}  // namespace vessel::actors
