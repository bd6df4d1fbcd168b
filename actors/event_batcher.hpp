#pragma once
// The reactor -> CAF hand-off. Code on the reactor thread appends events (whole messages, peer
// state changes) to a batch; the batch goes to its actor in ONE caf::anon_send at the end of the
// reactor turn (or as soon as it holds max_events). A thread hand-off costs 10-56 us on these
// machines (DESIGN.md, "Where the time goes"), so one per event would cap a link at ~20-100k
// messages/s; one per turn amortises it over a whole burst.
//
// Batches are vectors in recycled blocks: the receiving actor drops its event_batch handle, the
// block goes back to the batcher's free list with its capacity, and the next turn reuses it. In
// steady state nothing is allocated per event or per batch (CAF's own mailbox element per
// anon_send aside).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/send.hpp>

#include "io/reactor.hpp"

namespace vessel::actors {

template <class Event>
class event_batcher;

namespace detail {

template <class Event>
struct batch_recycler;

template <class Event>
struct batch_block {
  std::atomic<std::uint32_t> refs{0};
  std::vector<Event> events;
  // Set once, when the block is made: a handle per batch would cost two atomic RMWs a batch. The
  // cycle with the free list is broken by close().
  std::shared_ptr<batch_recycler<Event>> home;
};

// The free list of one batcher. Every block holds it, so it outlives the batcher while a batch
// is still out.
template <class Event>
struct batch_recycler : std::enable_shared_from_this<batch_recycler<Event>> {
  batch_recycler(std::size_t reserve_events, std::size_t max_free_blocks)
      : reserve{reserve_events}, max_free{max_free_blocks} {}
  batch_recycler(const batch_recycler&) = delete;
  batch_recycler& operator=(const batch_recycler&) = delete;

  batch_block<Event>* take() {
    {
      const std::lock_guard lock{mutex};
      if (!free.empty()) {
        auto* b = free.back();
        free.pop_back();
        return b;
      }
    }
    blocks_created.fetch_add(1, std::memory_order_relaxed);  // warm-up only
    auto* b = new batch_block<Event>{};
    b->events.reserve(reserve);
    b->home = this->shared_from_this();
    return b;
  }

  /// The batcher is gone: blocks are freed from now on, and those kept let go of the list.
  void close() noexcept {
    std::vector<batch_block<Event>*> kept;
    {
      const std::lock_guard lock{mutex};
      closed = true;
      kept.swap(free);
    }
    for (auto* b : kept) delete b;  // the batcher still holds the list: it outlives this loop
  }

  /// Static: the block may hold the last reference to its list, which must outlive the lock.
  static void give_back(batch_block<Event>* b) noexcept {
    b->events.clear();  // keeps the capacity; drops the events' own handles (payload slices)
    auto& home = *b->home;
    {
      const std::lock_guard lock{home.mutex};
      if (!home.closed && home.free.size() < home.max_free) {
        home.free.push_back(b);
        return;
      }
    }
    const auto keep = std::move(b->home);
    delete b;
  }

  const std::size_t reserve;
  const std::size_t max_free;
  std::mutex mutex;  // one lock per batch, never per event
  std::vector<batch_block<Event>*> free;
  bool closed = false;
  std::atomic<std::uint64_t> blocks_created{0};
};

}  // namespace detail

/// A batch of events as the receiving actor sees it: a copyable handle (a reference count) to a
/// recycled vector. Events are in push order. Take them out with `events()` (move from them);
/// the block returns to its batcher when the last handle is gone. Deliberately not a range (no
/// begin/end): CAF 0.17 would take it for a container and look for a serializable value_type.
template <class Event>
class event_batch {
 public:
  event_batch() noexcept = default;
  event_batch(const event_batch& other) noexcept : block_{other.block_} {
    if (block_ != nullptr) block_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  event_batch(event_batch&& other) noexcept : block_{std::exchange(other.block_, nullptr)} {}
  event_batch& operator=(event_batch other) noexcept {
    std::swap(block_, other.block_);
    return *this;
  }
  ~event_batch() { reset(); }

  /// The events (mutable so that the receiver can move payloads out; copies of this handle see
  /// the same vector).
  std::vector<Event>& events() const noexcept { return block_->events; }
  std::size_t size() const noexcept { return block_ != nullptr ? block_->events.size() : 0; }
  bool empty() const noexcept { return size() == 0; }

  /// Drops this handle now.
  void reset() noexcept {
    if (block_ == nullptr) return;
    if (block_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      detail::batch_recycler<Event>::give_back(block_);
    }
    block_ = nullptr;
  }

 private:
  friend class event_batcher<Event>;
  explicit event_batch(detail::batch_block<Event>* block) noexcept : block_{block} {
    block_->refs.store(1, std::memory_order_relaxed);
  }

  detail::batch_block<Event>* block_ = nullptr;
};

/// Every key of an event_batcher with its default.
struct event_batcher_config {
  /// A batch is sent as soon as it holds this many events, even mid-turn: bounds the latency a
  /// long turn adds and the size of one actor message.
  std::size_t max_events = 1024;
  /// Capacity reserved in a new block (the vector still grows up to max_events if needed).
  std::size_t reserve = 256;
  /// Blocks kept for reuse; more in flight than this are freed on return.
  std::size_t max_free_blocks = 16;
};

/// Counters of a batcher (reactor thread).
struct event_batcher_stats {
  std::uint64_t events = 0;          ///< events pushed
  std::uint64_t batches = 0;         ///< hand-offs (anon_sends) made
  std::uint64_t blocks_created = 0;  ///< blocks allocated (warm-up; flat in steady state)
};

/// Collects events on the reactor thread and hands them to one destination in batches.
/// Reactor thread only (or any single thread when no reactor is attached).
template <class Event>
class event_batcher {
 public:
  /// Batches go to `destination` (a caf::actor or a typed handle whose interface accepts
  /// event_batch<Event>) by caf::anon_send. With `r`, a batch started in a reactor turn is sent
  /// when the turn's completions are done (one posted work item, no allocation); without, the
  /// owner calls flush() itself.
  template <class Handle>
    requires(!std::is_invocable_v<Handle, event_batch<Event>&&>)
  event_batcher(Handle destination, io::reactor* r = nullptr, event_batcher_config config = {})
      : event_batcher{[destination = std::move(destination)](event_batch<Event>&& b) {
                        caf::anon_send(destination, std::move(b));
                      },
                      r, config} {}

  /// As above, but each batch goes to `deliver` (called on the batcher's thread), e.g. to an
  /// actor looked up at delivery time because a supervisor may have replaced it.
  event_batcher(std::function<void(event_batch<Event>&&)> deliver, io::reactor* r = nullptr,
                event_batcher_config config = {})
      : config_{config},
        reactor_{r},
        deliver_{std::move(deliver)},
        recycler_{std::make_shared<detail::batch_recycler<Event>>(config.reserve,
                                                                  config.max_free_blocks)} {}

  /// Sends what is pending. The owner must not destroy a reactor-attached batcher while a
  /// flush it posted may still run: destroy it after the reactor has stopped.
  ~event_batcher() {
    flush();
    recycler_->close();
  }

  event_batcher(const event_batcher&) = delete;
  event_batcher& operator=(const event_batcher&) = delete;

  /// Appends one event; sends the batch when it reaches max_events.
  void push(Event event) {
    if (current_ == nullptr) {
      current_ = recycler_->take();
      if (reactor_ != nullptr && !flush_posted_) {
        flush_posted_ = reactor_->post(io::work_item{&event_batcher::flush_thunk, this});
      }
    }
    current_->events.push_back(std::move(event));
    ++stats_.events;
    if (current_->events.size() >= config_.max_events) flush();
  }

  /// Sends the pending batch now (nothing when empty).
  void flush() {
    if (current_ == nullptr) return;
    ++stats_.batches;
    deliver_(event_batch<Event>{std::exchange(current_, nullptr)});
  }

  /// Events waiting in the current batch.
  std::size_t pending() const noexcept { return current_ != nullptr ? current_->events.size() : 0; }

  event_batcher_stats stats() const noexcept {
    auto s = stats_;
    s.blocks_created = recycler_->blocks_created.load(std::memory_order_relaxed);
    return s;
  }

 private:
  static void flush_thunk(void* self) noexcept {
    auto* me = static_cast<event_batcher*>(self);
    me->flush_posted_ = false;
    me->flush();
  }

  event_batcher_config config_;
  io::reactor* reactor_;
  std::function<void(event_batch<Event>&&)> deliver_;  // built once; calling it allocates nothing
  std::shared_ptr<detail::batch_recycler<Event>> recycler_;
  detail::batch_block<Event>* current_ = nullptr;
  bool flush_posted_ = false;
  event_batcher_stats stats_;
};

}  // namespace vessel::actors

namespace caf {
template <class Event>
struct allowed_unsafe_message_type<vessel::actors::event_batch<Event>> : std::true_type {};
}  // namespace caf
