#include "collectives/algorithms/binomial_gather.hpp"

#include <cstring>

#include "collectives/algorithms/algorithm_checks.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::collectives {

namespace {

binomial_tree tree_for(const algorithm_params& p) noexcept {
  return params_valid(p) ? binomial_tree(p.rank, p.size, p.root) : binomial_tree(0, 1, 0);
}

}  // namespace

binomial_gather::binomial_gather(const algorithm_params& params) noexcept
    : params_(params), valid_(params_valid(params)), tree_(tree_for(params)) {}

std::size_t binomial_gather::scratch_bytes() const noexcept {
  if (!valid_ || tree_.is_root() || tree_.children().empty()) return 0;
  const auto bytes = checked_bytes(params_.count, size_of(params_.type), tree_.subtree());
  return bytes ? bytes.value() : 0;
}

result<void> binomial_gather::start(const algorithm_buffers& buffers, std::vector<send_step>& out) {
  if (started_) return errc::invalid_argument;
  VESSEL_TRY(check_params(params_));
  VESSEL_TRY(block, checked_bytes(params_.count, size_of(params_.type)));
  VESSEL_TRY(total, checked_bytes(params_.count, size_of(params_.type), params_.size));
  VESSEL_TRY(check_buffer(buffers.input, block));
  if (tree_.is_root()) {
    VESSEL_TRY(check_buffer(buffers.output, total));
  }
  VESSEL_TRY(check_buffer(buffers.scratch, scratch_bytes()));
  block_ = block;
  chunk_ = chunk_granule(params_.chunk_bytes, size_of(params_.type));
  const auto children = tree_.children();
  for (std::size_t i = 0; i < children.size(); ++i) {
    child_layout_[i] = tree_.blocks_layout(children[i].vrank, children[i].subtree, block, chunk_);
    if (!child_layout_[i].fits_chunk_field()) return errc::invalid_argument;
    pending_ += child_layout_[i].count();
  }
  if (!tree_.blocks_layout(tree_.vrank(), tree_.subtree(), block, chunk_).fits_chunk_field()) {
    return errc::invalid_argument;
  }
  buffers_ = buffers;
  started_ = true;

  // Our own block goes first in the subtree's range (at the root: to its absolute place).
  if (block != 0) {
    if (tree_.is_root()) {
      std::byte* own = buffers.output.data() + std::size_t{params_.rank} * block;
      if (own != buffers.input.data()) std::memmove(own, buffers.input.data(), block);
    } else if (!children.empty()) {
      wire::copy_bytes(buffers.scratch.data(), buffers.input.data(), block);
    }
  }
  if (pending_ == 0) send_up(out);
  return outcome::success();
}

result<receive_status> binomial_gather::on_receive(std::uint32_t peer, std::uint32_t step,
                                                   std::uint32_t chunk,
                                                   std::span<const std::byte> data,
                                                   std::vector<send_step>& out) {
  if (!started_) return receive_status::not_yet;
  const auto child = tree_.child_index(peer);
  // A child sends its subtree once, chunk after chunk, at step 0.
  if (!child || step != 0 || chunk != next_chunk_[*child] ||
      chunk >= child_layout_[*child].count()) {
    return protocol_violation();
  }
  const byte_range range = child_layout_[*child].at(chunk);
  if (data.size() != range.bytes) return protocol_violation();

  const tree_child& from = tree_.children()[*child];
  const std::size_t position = std::size_t{from.vrank - tree_.vrank()} * block_ + range.offset;
  std::byte* destination = tree_.is_root()
                               ? buffers_.output.data() + tree_.absolute_offset(position, block_)
                               : buffers_.scratch.data() + position;
  wire::copy_bytes(destination, data.data(), range.bytes);
  ++next_chunk_[*child];
  if (--pending_ == 0) send_up(out);
  return receive_status::consumed;
}

std::uint32_t binomial_gather::waiting_for(std::vector<std::uint32_t>& peers) const {
  if (!started_ || done()) return 0;
  const auto children = tree_.children();
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (next_chunk_[i] < child_layout_[i].count()) peers.push_back(children[i].rank);
  }
  return 0;
}

void binomial_gather::send_up(std::vector<send_step>& out) const {
  if (tree_.is_root()) return;
  const chunk_layout layout = tree_.blocks_layout(tree_.vrank(), tree_.subtree(), block_, chunk_);
  const buffer_id from = tree_.children().empty() ? buffer_id::input : buffer_id::scratch;
  for (std::size_t c = 0; c < layout.count(); ++c) {
    const byte_range range = layout.at(c);
    out.push_back(
        {tree_.parent(), 0, static_cast<std::uint32_t>(c), from, range.offset, range.bytes});
  }
}

}  // namespace vessel::collectives
