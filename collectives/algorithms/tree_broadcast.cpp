#include "collectives/algorithms/tree_broadcast.hpp"

#include <algorithm>
#include <cstring>

#include "collectives/algorithms/algorithm_checks.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::collectives {

tree_broadcast::tree_broadcast(const algorithm_params& params) noexcept : params_(params) {}

void tree_broadcast::set_shape(std::uint32_t parent,
                               std::span<const std::uint32_t> children) noexcept {
  parent_ = parent;
  child_count_ = std::min(children.size(), children_.size());
  std::copy_n(children.begin(), child_count_, children_.begin());
}

result<void> tree_broadcast::start(const algorithm_buffers& buffers, std::vector<send_step>& out) {
  if (started_) return errc::invalid_argument;
  VESSEL_TRY(check_params(params_));
  VESSEL_TRY(total, checked_bytes(params_.count, size_of(params_.type)));
  const bool root = params_.rank == params_.root;
  if (root) {
    VESSEL_TRY(check_buffer(buffers.input, total));
  }
  VESSEL_TRY(check_buffer(buffers.output, total));
  layout_ = chunk_layout(total, chunk_granule(params_.chunk_bytes, size_of(params_.type)));
  if (!layout_.fits_chunk_field()) return errc::invalid_argument;
  buffers_ = buffers;
  started_ = true;
  rendezvous_ = total >= rendezvous_bytes && params_.size > 1;
  for (std::size_t i = 0; i < child_count_; ++i) child_ready_[i] = !rendezvous_;
  children_ready_ = rendezvous_ ? 0 : child_count_;
  if (!root) {
    if (rendezvous_) out.push_back({parent_, ready_step, 0, buffer_id::output, 0, 0});
    return outcome::success();
  }

  // The root sends from input (nothing to wait for) and keeps its own copy in output.
  if (total != 0 && buffers.input.data() != buffers.output.data()) {
    std::memmove(buffers.output.data(), buffers.input.data(), total);
  }
  for (std::size_t c = 0; c < layout_.count(); ++c) forward(c, out);
  received_ = layout_.count();
  return outcome::success();
}

result<receive_status> tree_broadcast::on_receive(std::uint32_t peer, std::uint32_t step,
                                                  std::uint32_t chunk,
                                                  std::span<const std::byte> data,
                                                  std::vector<send_step>& out) {
  if (!started_) return receive_status::not_yet;
  if (step == ready_step) {  // a child, once, before anything is sent to it
    for (std::size_t i = 0; i < child_count_; ++i) {
      if (children_[i] != peer) continue;
      if (!rendezvous_ || child_ready_[i] || chunk != 0 || !data.empty()) break;
      on_ready(i, out);
      return receive_status::consumed;
    }
    return protocol_violation();
  }
  // Only the parent sends, once per chunk, in order: anything else is a broken peer.
  if (params_.rank == params_.root || peer != parent_ || step != data_step ||
      chunk != received_ || chunk >= layout_.count()) {
    return protocol_violation();
  }
  const byte_range range = layout_.at(chunk);
  if (data.size() != range.bytes) return protocol_violation();
  std::byte* place = buffers_.output.data() + range.offset;
  if (data.data() != place) wire::copy_bytes(place, data.data(), range.bytes);  // else landed
  ++received_;
  forward(chunk, out);
  return receive_status::consumed;
}

std::span<std::byte> tree_broadcast::landing(std::uint32_t peer, std::uint32_t step,
                                             std::uint32_t chunk) const noexcept {
  // Each chunk comes once, from the parent, in order, and on_receive takes it whenever it comes
  // (never not_yet once started); nothing reads its place in output before it is there (it is
  // forwarded from there afterwards). Reads only what start() fixed.
  if (params_.rank == params_.root || peer != parent_ || step != data_step ||
      chunk >= layout_.count()) {
    return {};
  }
  const byte_range range = layout_.at(chunk);
  if (range.bytes == 0 || range.offset + range.bytes > buffers_.output.size()) return {};
  return buffers_.output.subspan(range.offset, range.bytes);
}

std::optional<std::uint64_t> tree_broadcast::chunks_to_receive() const noexcept {
  const std::uint64_t from_parent = params_.rank == params_.root ? 0 : layout_.count();
  return from_parent + (rendezvous_ ? child_count_ : 0);
}

bool tree_broadcast::done() const noexcept {
  return started_ && received_ == layout_.count() && children_ready_ == child_count_;
}

std::uint32_t tree_broadcast::waiting_for(std::vector<std::uint32_t>& peers) const {
  if (!started_ || done()) return 0;
  if (received_ != layout_.count()) peers.push_back(parent_);
  for (std::size_t i = 0; i < child_count_; ++i) {
    if (!child_ready_[i]) peers.push_back(children_[i]);
  }
  return 0;
}

buffer_id tree_broadcast::source() const noexcept {
  return params_.rank == params_.root ? buffer_id::input : buffer_id::output;
}

void tree_broadcast::send_chunk(std::size_t child, std::size_t chunk,
                                std::vector<send_step>& out) const {
  const byte_range range = layout_.at(chunk);
  out.push_back({children_[child], data_step, static_cast<std::uint32_t>(chunk), source(),
                 range.offset, range.bytes, /*lendable=*/true});
}

void tree_broadcast::forward(std::size_t chunk, std::vector<send_step>& out) const {
  for (std::size_t i = 0; i < child_count_; ++i) {
    if (child_ready_[i]) send_chunk(i, chunk, out);  // else it gets it once ready (on_ready)
  }
}

void tree_broadcast::on_ready(std::size_t child, std::vector<send_step>& out) {
  child_ready_[child] = true;
  ++children_ready_;
  for (std::size_t c = 0; c < received_; ++c) send_chunk(child, c, out);
}

}  // namespace vessel::collectives
