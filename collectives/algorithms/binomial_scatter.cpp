#include "collectives/algorithms/binomial_scatter.hpp"

#include <cstring>

#include "collectives/algorithms/algorithm_checks.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::collectives {

namespace {

binomial_tree tree_for(const algorithm_params& p) noexcept {
  return params_valid(p) ? binomial_tree(p.rank, p.size, p.root) : binomial_tree(0, 1, 0);
}

}  // namespace

binomial_scatter::binomial_scatter(const algorithm_params& params) noexcept
    : params_(params), valid_(params_valid(params)), tree_(tree_for(params)) {}

std::size_t binomial_scatter::scratch_bytes() const noexcept {
  if (!valid_ || tree_.is_root() || tree_.children().empty()) return 0;
  const auto bytes = checked_bytes(params_.count, size_of(params_.type), tree_.subtree());
  return bytes ? bytes.value() : 0;
}

result<void> binomial_scatter::start(const algorithm_buffers& buffers,
                                     std::vector<send_step>& out) {
  if (started_) return errc::invalid_argument;
  VESSEL_TRY(check_params(params_));
  VESSEL_TRY(block, checked_bytes(params_.count, size_of(params_.type)));
  VESSEL_TRY(total, checked_bytes(params_.count, size_of(params_.type), params_.size));
  if (tree_.is_root()) {
    VESSEL_TRY(check_buffer(buffers.input, total));
  }
  VESSEL_TRY(check_buffer(buffers.output, block));
  VESSEL_TRY(check_buffer(buffers.scratch, scratch_bytes()));
  block_ = block;
  chunk_ = chunk_granule(params_.chunk_bytes, size_of(params_.type));
  layout_ = tree_.blocks_layout(tree_.vrank(), tree_.subtree(), block, chunk_);
  if (!layout_.fits_chunk_field()) return errc::invalid_argument;
  buffers_ = buffers;
  started_ = true;
  if (!tree_.is_root()) {
    forward_ready(out);  // nothing to wait for when blocks are empty
    return outcome::success();
  }

  if (block != 0) {
    const std::byte* own = buffers.input.data() + std::size_t{params_.rank} * block;
    if (own != buffers.output.data()) std::memmove(buffers.output.data(), own, block);
  }
  // The largest subtree first: it is the longest path still to go.
  const auto children = tree_.children();
  for (std::size_t i = children.size(); i-- > 0;) {
    const chunk_layout layout =
        tree_.blocks_layout(children[i].vrank, children[i].subtree, block, chunk_);
    const std::size_t base = std::size_t{children[i].vrank} * block;
    for (std::size_t c = 0; c < layout.count(); ++c) {
      const byte_range range = layout.at(c);
      out.push_back({children[i].rank, 0, static_cast<std::uint32_t>(c), buffer_id::input,
                     tree_.absolute_offset(base + range.offset, block), range.bytes});
    }
  }
  received_ = layout_.count();
  return outcome::success();
}

result<receive_status> binomial_scatter::on_receive(std::uint32_t peer, std::uint32_t step,
                                                    std::uint32_t chunk,
                                                    std::span<const std::byte> data,
                                                    std::vector<send_step>& out) {
  if (!started_) return receive_status::not_yet;
  // Only the parent sends, our subtree's blocks once, chunk after chunk, at step 0.
  if (tree_.is_root() || peer != tree_.parent() || step != 0 || chunk != received_ ||
      chunk >= layout_.count()) {
    return protocol_violation();
  }
  const byte_range range = layout_.at(chunk);
  if (data.size() != range.bytes) return protocol_violation();
  const bool leaf = tree_.children().empty();
  std::byte* destination = (leaf ? buffers_.output.data() : buffers_.scratch.data()) + range.offset;
  wire::copy_bytes(destination, data.data(), range.bytes);
  ++received_;
  prefix_ = range.offset + range.bytes;
  forward_ready(out);
  return receive_status::consumed;
}

std::uint32_t binomial_scatter::waiting_for(std::vector<std::uint32_t>& peers) const {
  if (started_ && !done()) peers.push_back(tree_.parent());
  return 0;
}

void binomial_scatter::forward_ready(std::vector<send_step>& out) {
  if (tree_.children().empty()) return;
  if (!own_copied_ && prefix_ >= block_) {
    if (block_ != 0) wire::copy_bytes(buffers_.output.data(), buffers_.scratch.data(), block_);
    own_copied_ = true;
  }
  const auto children = tree_.children();
  while (next_child_ < children.size()) {
    const tree_child& child = children[next_child_];
    const std::size_t base = std::size_t{child.vrank - tree_.vrank()} * block_;
    if (base + std::size_t{child.subtree} * block_ > prefix_) break;
    const chunk_layout layout = tree_.blocks_layout(child.vrank, child.subtree, block_, chunk_);
    for (std::size_t c = 0; c < layout.count(); ++c) {
      const byte_range range = layout.at(c);
      out.push_back({child.rank, 0, static_cast<std::uint32_t>(c), buffer_id::scratch,
                     base + range.offset, range.bytes});
    }
    ++next_child_;
  }
}

}  // namespace vessel::collectives
