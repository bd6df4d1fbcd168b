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
  if (!root) return outcome::success();

  // The root sends from input (nothing to wait for) and keeps its own copy in output.
  if (total != 0 && buffers.input.data() != buffers.output.data()) {
    std::memmove(buffers.output.data(), buffers.input.data(), total);
  }
  for (std::size_t c = 0; c < layout_.count(); ++c) forward(c, buffer_id::input, out);
  received_ = layout_.count();
  return outcome::success();
}

result<receive_status> tree_broadcast::on_receive(std::uint32_t peer, std::uint32_t step,
                                                  std::uint32_t chunk,
                                                  std::span<const std::byte> data,
                                                  std::vector<send_step>& out) {
  if (!started_) return receive_status::not_yet;
  // Only the parent sends, once per chunk, in order: anything else is a broken peer.
  if (params_.rank == params_.root || peer != parent_ || step != 0 || chunk != received_ ||
      chunk >= layout_.count()) {
    return protocol_violation();
  }
  const byte_range range = layout_.at(chunk);
  if (data.size() != range.bytes) return protocol_violation();
  std::byte* place = buffers_.output.data() + range.offset;
  if (data.data() != place) wire::copy_bytes(place, data.data(), range.bytes);  // else landed
  ++received_;
  forward(chunk, buffer_id::output, out);
  return receive_status::consumed;
}

std::span<std::byte> tree_broadcast::landing(std::uint32_t peer, std::uint32_t step,
                                             std::uint32_t chunk) const noexcept {
  // Each chunk comes once, from the parent, in order, and on_receive takes it whenever it comes
  // (never not_yet once started); nothing reads its place in output before it is there (it is
  // forwarded from there afterwards). Reads only what start() fixed.
  if (params_.rank == params_.root || peer != parent_ || step != 0 || chunk >= layout_.count()) {
    return {};
  }
  const byte_range range = layout_.at(chunk);
  if (range.bytes == 0 || range.offset + range.bytes > buffers_.output.size()) return {};
  return buffers_.output.subspan(range.offset, range.bytes);
}

bool tree_broadcast::done() const noexcept {
  return started_ && received_ == layout_.count();
}

std::uint32_t tree_broadcast::waiting_for(std::vector<std::uint32_t>& peers) const {
  if (started_ && !done()) peers.push_back(parent_);
  return 0;
}

void tree_broadcast::forward(std::size_t chunk, buffer_id from, std::vector<send_step>& out) const {
  const byte_range range = layout_.at(chunk);
  for (std::size_t i = 0; i < child_count_; ++i) {
    out.push_back(
        {children_[i], 0, static_cast<std::uint32_t>(chunk), from, range.offset, range.bytes});
  }
}

}  // namespace vessel::collectives
