#include "actors/message_matcher.hpp"

#include <algorithm>
#include <utility>

#include "actors/comm_errc.hpp"
#include "actors/link_credit.hpp"

namespace vessel::actors {
namespace {

constexpr std::uint64_t make_id(std::uint32_t index, std::uint32_t generation) noexcept {
  return (std::uint64_t{generation} << 32) | (std::uint64_t{index} + 1);
}

/// What a queued message keeps from its pool: the whole block, whatever part of it the message
/// fills (a 256 KiB message holds a 1 MiB block of the runtime's pool).
std::size_t held_bytes(const p2p_message& m) noexcept {
  return std::max(m.payload.size(), m.payload.owner().size());
}

}  // namespace

message_matcher::message_matcher(matcher_config config, credit_sink& sink)
    : config_{config},
      sink_{sink},
      unexpected_by_source_(std::max<std::uint32_t>(1, config.world_size)) {
  unexpected_.reserve(config_.initial_nodes);
  free_unexpected_.reserve(config_.initial_nodes);
  pending_.reserve(config_.initial_nodes);
  free_pending_.reserve(config_.initial_nodes);
  const double f = std::clamp(config_.resume_fraction, 0.0, 1.0);
  low_bytes_ = static_cast<std::size_t>(static_cast<double>(config_.max_unexpected_bytes) * f);
  low_messages_ =
      static_cast<std::size_t>(static_cast<double>(config_.max_unexpected_messages) * f);
}

// -- receives -------------------------------------------------------------------------------

result<message_matcher::post_result> message_matcher::post_receive(std::uint32_t source,
                                                                   std::uint64_t tag,
                                                                   std::uint64_t cookie) {
  if (source != any_source && source >= config_.world_size) {
    return comm_errc::source_out_of_range;
  }
  post_result out;
  if ((out.message = take_now(source, tag))) return out;
  const std::uint32_t index = allocate_pending();
  pending_node& n = pending_[index];
  n.source = source;
  n.tag = tag;
  n.cookie = cookie;
  n.live = true;
  n.next = nil;
  n.prev = pending_all_.tail;
  if (pending_all_.tail != nil) {
    pending_[pending_all_.tail].next = index;
  } else {
    pending_all_.head = index;
  }
  pending_all_.tail = index;
  ++stats_.pending_receives;
  out.id = make_id(index, n.generation);
  return out;
}

bool message_matcher::cancel(receive_id id) noexcept {
  if (id == 0) return false;
  const std::uint64_t low = id & 0xffff'ffffu;
  const auto index = static_cast<std::uint32_t>(low - 1);
  const auto generation = static_cast<std::uint32_t>(id >> 32);
  if (index >= pending_.size()) return false;
  pending_node& n = pending_[index];
  if (!n.live || n.generation != generation) return false;
  unlink_pending(index);
  free_pending(index);
  ++stats_.cancelled;
  return true;
}

// -- arrivals -------------------------------------------------------------------------------

result<std::optional<message_matcher::completion>> message_matcher::arrive(p2p_message&& message) {
  if (message.source >= config_.world_size) return comm_errc::source_out_of_range;
  ++stats_.arrived;
  // The oldest pending receive that fits: pending lists are short (a rank waits for a few
  // messages at a time), so a scan in posting order is both simplest and what MPI requires.
  for (std::uint32_t i = pending_all_.head; i != nil; i = pending_[i].next) {
    const pending_node& n = pending_[i];
    if (!fits(n.source, n.tag, message.source, message.tag)) continue;
    completion done{make_id(i, n.generation), n.cookie, std::move(message)};
    unlink_pending(i);
    free_pending(i);
    ++stats_.matched_on_arrival;
    sink_.release(done.message.source, message_credit(done.message.payload.size()));
    return std::optional<completion>{std::move(done)};
  }
  queue_unexpected(std::move(message));
  return std::optional<completion>{};
}

std::optional<message_matcher::pending_receive> message_matcher::oldest_fit(
    std::uint32_t source, std::uint64_t tag) const noexcept {
  if (source >= config_.world_size) return std::nullopt;
  for (std::uint32_t i = pending_all_.head; i != nil; i = pending_[i].next) {
    const pending_node& n = pending_[i];
    if (fits(n.source, n.tag, source, tag)) return pending_receive{make_id(i, n.generation), n.cookie};
  }
  return std::nullopt;
}

bool message_matcher::claim(receive_id id) noexcept {
  if (!cancel(id)) return false;
  --stats_.cancelled;  // cancel() counted it; it is a match
  ++stats_.arrived;
  ++stats_.matched_on_arrival;
  ++stats_.claimed;
  return true;
}

std::optional<p2p_message> message_matcher::take_now(std::uint32_t source, std::uint64_t tag) {
  if (source != any_source && source >= config_.world_size) return std::nullopt;
  const std::uint32_t hit = find_unexpected(source, tag);
  if (hit == nil) return std::nullopt;
  ++stats_.matched_on_post;
  return take_unexpected(hit);
}

const p2p_message* message_matcher::probe(std::uint32_t source, std::uint64_t tag) const noexcept {
  const std::uint32_t hit = find_unexpected(source, tag);
  return hit == nil ? nullptr : &unexpected_[hit].message;
}

// -- the unexpected queue -------------------------------------------------------------------

std::uint32_t message_matcher::find_unexpected(std::uint32_t source,
                                               std::uint64_t tag) const noexcept {
  if (source == any_source) {
    for (std::uint32_t i = unexpected_all_.head; i != nil; i = unexpected_[i].next) {
      if (fits(any_source, tag, 0, unexpected_[i].message.tag)) return i;
    }
    return nil;
  }
  if (source >= unexpected_by_source_.size()) return nil;
  for (std::uint32_t i = unexpected_by_source_[source].head; i != nil;
       i = unexpected_[i].next_src) {
    if (fits(any_source, tag, 0, unexpected_[i].message.tag)) return i;
  }
  return nil;
}

void message_matcher::queue_unexpected(p2p_message&& message) {
  std::uint32_t index;
  if (!free_unexpected_.empty()) {
    index = free_unexpected_.back();
    free_unexpected_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(unexpected_.size());
    unexpected_.emplace_back();  // grows past a high-water mark only
    // Every node can be free at once: keep the free list's capacity level with the nodes.
    if (free_unexpected_.capacity() < unexpected_.capacity()) {
      free_unexpected_.reserve(unexpected_.capacity());
    }
  }
  unexpected_node& n = unexpected_[index];
  const std::uint32_t source = message.source;
  const std::size_t bytes = message.payload.size();
  const std::size_t held = held_bytes(message);
  n.message = std::move(message);

  n.next = nil;
  n.prev = unexpected_all_.tail;
  if (unexpected_all_.tail != nil) {
    unexpected_[unexpected_all_.tail].next = index;
  } else {
    unexpected_all_.head = index;
  }
  unexpected_all_.tail = index;

  list& by_source = unexpected_by_source_[source];
  n.next_src = nil;
  n.prev_src = by_source.tail;
  if (by_source.tail != nil) {
    unexpected_[by_source.tail].next_src = index;
  } else {
    by_source.head = index;
  }
  by_source.tail = index;

  ++stats_.unexpected_messages;
  stats_.unexpected_bytes += bytes;
  stats_.unexpected_peak_bytes = std::max(stats_.unexpected_peak_bytes, stats_.unexpected_bytes);
  stats_.unexpected_held_bytes += held;

  if (!over_bound_ && (stats_.unexpected_held_bytes > config_.max_unexpected_bytes ||
                       stats_.unexpected_messages > config_.max_unexpected_messages)) {
    over_bound_ = true;
    ++stats_.backpressure_episodes;
    sink_.on_backpressure(true);
  }
  if (over_bound_) {
    n.credit_held = true;
    ++stats_.credit_withheld;
  } else {
    n.credit_held = false;
    sink_.release(source, message_credit(bytes));
  }
}

p2p_message message_matcher::take_unexpected(std::uint32_t index) {
  unexpected_node& n = unexpected_[index];
  if (n.prev != nil)
    unexpected_[n.prev].next = n.next;
  else
    unexpected_all_.head = n.next;
  if (n.next != nil)
    unexpected_[n.next].prev = n.prev;
  else
    unexpected_all_.tail = n.prev;
  list& by_source = unexpected_by_source_[n.message.source];
  if (n.prev_src != nil)
    unexpected_[n.prev_src].next_src = n.next_src;
  else
    by_source.head = n.next_src;
  if (n.next_src != nil)
    unexpected_[n.next_src].prev_src = n.prev_src;
  else
    by_source.tail = n.prev_src;

  p2p_message out = std::move(n.message);
  n.message = p2p_message{};
  --stats_.unexpected_messages;
  stats_.unexpected_bytes -= out.payload.size();
  stats_.unexpected_held_bytes -= held_bytes(out);
  if (n.credit_held) sink_.release(out.source, message_credit(out.payload.size()));
  n.credit_held = false;
  free_unexpected_.push_back(index);  // capacity reserved: no allocation below the high water
  update_bound();
  return out;
}

void message_matcher::update_bound() {
  if (!over_bound_) return;
  if (stats_.unexpected_held_bytes > low_bytes_ || stats_.unexpected_messages > low_messages_) {
    return;
  }
  over_bound_ = false;
  // Drained: what is still queued counts against the bound again, so its credit may flow.
  for (std::uint32_t i = unexpected_all_.head; i != nil; i = unexpected_[i].next) {
    unexpected_node& n = unexpected_[i];
    if (!n.credit_held) continue;
    n.credit_held = false;
    sink_.release(n.message.source, message_credit(n.message.payload.size()));
  }
  sink_.on_backpressure(false);
}

// -- pending nodes --------------------------------------------------------------------------

std::uint32_t message_matcher::allocate_pending() {
  if (!free_pending_.empty()) {
    const std::uint32_t index = free_pending_.back();
    free_pending_.pop_back();
    return index;
  }
  pending_.emplace_back();
  pending_.back().generation = 1;
  if (free_pending_.capacity() < pending_.capacity()) free_pending_.reserve(pending_.capacity());
  return static_cast<std::uint32_t>(pending_.size() - 1);
}

void message_matcher::unlink_pending(std::uint32_t index) noexcept {
  pending_node& n = pending_[index];
  if (n.prev != nil)
    pending_[n.prev].next = n.next;
  else
    pending_all_.head = n.next;
  if (n.next != nil)
    pending_[n.next].prev = n.prev;
  else
    pending_all_.tail = n.prev;
  n.prev = n.next = nil;
  --stats_.pending_receives;
}

void message_matcher::free_pending(std::uint32_t index) noexcept {
  pending_node& n = pending_[index];
  n.live = false;
  ++n.generation;
  if (n.generation == 0) n.generation = 1;
  free_pending_.push_back(index);  // capacity kept level with the nodes: cannot allocate
}

}  // namespace vessel::actors
