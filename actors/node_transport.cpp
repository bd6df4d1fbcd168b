#include "actors/node_transport.hpp"

#include "actors/errc.hpp"

namespace vessel::actors {

result<void> loopback_transport::send(std::uint32_t dst, std::uint64_t tag,
                                      io::buffer_slice payload) {
  if (dst != 0) return errc::rank_out_of_range;
  queue_.push_back(inbound_message{0, tag, next_id_++, std::move(payload)});
  if (!posted_) posted_ = reactor_.post(io::work_item{&loopback_transport::deliver_thunk, this});
  return outcome::success();
}

void loopback_transport::deliver_thunk(void* self) noexcept {
  auto* me = static_cast<loopback_transport*>(self);
  me->posted_ = false;
  // Only what was queued before this turn: a message sent from on_message waits for the next.
  for (auto n = me->queue_.size(); n > 0; --n) {
    auto m = std::move(me->queue_.front());
    me->queue_.pop_front();
    me->observer_.on_message(std::move(m));
  }
  if (!me->queue_.empty() && !me->posted_) {
    me->posted_ = me->reactor_.post(io::work_item{&loopback_transport::deliver_thunk, me});
  }
}

}  // namespace vessel::actors
