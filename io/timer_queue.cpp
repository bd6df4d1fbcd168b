#include "io/timer_queue.hpp"

#include <algorithm>
#include <new>

namespace vessel::io {

timer_id timer_queue::add(clock::time_point deadline, std::function<void()> fn) {
  const timer_id id = next_id_++;
  if (spare_.empty()) {
    callbacks_.emplace(id, std::move(fn));
  } else {
    auto node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = id;
    node.mapped() = std::move(fn);
    callbacks_.insert(std::move(node));
  }
  heap_.push_back({deadline, id});
  std::push_heap(heap_.begin(), heap_.end(), std::greater<>{});
  return id;
}

bool timer_queue::cancel(timer_id id) noexcept {
  auto node = callbacks_.extract(id);
  if (node.empty()) return false;
  node.mapped() = nullptr;  // its captures go now, as erase would have dropped them
  recycle(std::move(node));
  // Cancelled entries stay in the heap until they reach the top; rebuild when they dominate so a
  // transport that re-arms a timer per message cannot grow the heap without bound.
  if (heap_.size() > 64 && heap_.size() > 2 * callbacks_.size()) {
    std::erase_if(heap_, [this](const entry& e) { return !callbacks_.contains(e.id); });
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>{});
  }
  return true;
}

void timer_queue::drop_cancelled_top() noexcept {
  while (!heap_.empty() && !callbacks_.contains(heap_.front().id)) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>{});
    heap_.pop_back();
  }
}

std::optional<timer_queue::clock::time_point> timer_queue::next_deadline() noexcept {
  drop_cancelled_top();
  if (heap_.empty()) return std::nullopt;
  return heap_.front().deadline;
}

std::size_t timer_queue::run_due(clock::time_point now) {
  const timer_id first_new = next_id_;  // ids added by the callbacks below wait for the next call
  std::size_t ran = 0;
  for (;;) {
    drop_cancelled_top();
    if (heap_.empty() || heap_.front().deadline > now || heap_.front().id >= first_new) break;
    const timer_id id = heap_.front().id;
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>{});
    heap_.pop_back();
    auto it = callbacks_.find(id);
    if (it == callbacks_.end()) continue;  // cannot happen: drop_cancelled_top() kept only live ids
    auto node = callbacks_.extract(it);
    std::function<void()> fn = std::move(node.mapped());
    recycle(std::move(node));
    fn();  // may add or cancel timers
    ++ran;
  }
  return ran;
}

void timer_queue::recycle(callback_map::node_type node) noexcept {
  constexpr std::size_t max_spare = 64;
  if (spare_.size() >= max_spare) return;  // the node is freed here
  if (spare_.capacity() == 0) {
    try {
      spare_.reserve(max_spare);
    } catch (const std::bad_alloc&) {
      return;
    }
  }
  spare_.push_back(std::move(node));
}

void timer_queue::clear() noexcept {
  heap_.clear();
  callbacks_.clear();
  spare_.clear();
}

}  // namespace vessel::io
