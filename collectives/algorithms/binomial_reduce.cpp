#include "collectives/algorithms/binomial_reduce.hpp"

#include <cstring>

#include "collectives/algorithms/algorithm_checks.hpp"
#include "collectives/reduce.hpp"

namespace vessel::collectives {

namespace {

algorithm_params sane(const algorithm_params& p) noexcept {
  if (params_valid(p)) return p;
  algorithm_params single = p;  // a valid shape to build the tree from; start() reports p
  single.rank = 0;
  single.root = 0;
  single.size = 1;
  return single;
}

}  // namespace

binomial_reduce::binomial_reduce(const algorithm_params& params) noexcept
    : params_(params),
      valid_(params_valid(params)),
      tree_(sane(params).rank, sane(params).size, sane(params).root) {}

std::size_t binomial_reduce::scratch_bytes() const noexcept {
  if (!valid_ || tree_.is_root() || tree_.children().empty()) return 0;
  const auto bytes = checked_bytes(params_.count, size_of(params_.type));
  return bytes ? bytes.value() : 0;
}

result<void> binomial_reduce::start(const algorithm_buffers& buffers, std::vector<send_step>& out) {
  if (started_) return errc::invalid_argument;
  VESSEL_TRY(check_params(params_));
  if (!supports(params_.type, params_.op)) return errc::unsupported_op;
  VESSEL_TRY(total, checked_bytes(params_.count, size_of(params_.type)));
  VESSEL_TRY(check_buffer(buffers.input, total));
  if (tree_.is_root()) {
    VESSEL_TRY(check_buffer(buffers.output, total));
  }
  VESSEL_TRY(check_buffer(buffers.scratch, scratch_bytes()));
  layout_ = chunk_layout(total, chunk_granule(params_.chunk_bytes, size_of(params_.type)));
  if (!layout_.fits_chunk_field()) return errc::invalid_argument;
  buffers_ = buffers;
  started_ = true;

  if (tree_.is_root()) {
    accumulator_ = buffers.output.first(total);
    accumulator_id_ = buffer_id::output;
  } else {
    accumulator_ = buffers.scratch.first(scratch_bytes());
    accumulator_id_ = buffer_id::scratch;
  }
  if (!tree_.children().empty()) return outcome::success();

  // A leaf (or a communicator of one) has nothing to wait for.
  if (tree_.is_root()) {
    if (total != 0 && buffers.input.data() != buffers.output.data()) {
      std::memmove(buffers.output.data(), buffers.input.data(), total);
    }
  }
  for (std::size_t c = 0; c < layout_.count(); ++c) {
    VESSEL_TRY(complete_chunk(c, out));
  }
  return outcome::success();
}

result<receive_status> binomial_reduce::on_receive(std::uint32_t peer, std::uint32_t step,
                                                   std::uint32_t chunk,
                                                   std::span<const std::byte> data,
                                                   std::vector<send_step>& out) {
  if (!started_) return receive_status::not_yet;
  const auto child = tree_.child_index(peer);
  // Each child sends every chunk once, in order, at step 0.
  if (!child || step != 0 || chunk != next_chunk_[*child] || chunk >= layout_.count()) {
    return protocol_violation();
  }
  const byte_range range = layout_.at(chunk);
  if (data.size() != range.bytes) return protocol_violation();
  // The fixed order: the previous child's chunk must be in first.
  if (*child > 0 && next_chunk_[*child - 1] <= chunk) return receive_status::not_yet;

  const auto acc = accumulator_.subspan(range.offset, range.bytes);
  if (*child == 0) {  // the first contribution in: our own input and the child's, one pass
    VESSEL_TRY(reduce_to(acc, buffers_.input.subspan(range.offset, range.bytes), data,
                         params_.type, params_.op));
  } else {
    VESSEL_TRY(reduce_into(acc, data, params_.type, params_.op));
  }
  ++next_chunk_[*child];
  if (*child + 1 == tree_.children().size()) {
    VESSEL_TRY(complete_chunk(chunk, out));
  }
  return receive_status::consumed;
}

result<void> binomial_reduce::complete_chunk(std::size_t chunk, std::vector<send_step>& out) {
  const byte_range range = layout_.at(chunk);
  ++completed_;
  if (tree_.is_root()) {
    if (params_.op == reduce_op::avg) {
      VESSEL_TRY(finish_average(accumulator_.subspan(range.offset, range.bytes), params_.type,
                                params_.size));
    }
    return outcome::success();
  }
  const buffer_id from = tree_.children().empty() ? buffer_id::input : accumulator_id_;
  out.push_back(
      {tree_.parent(), 0, static_cast<std::uint32_t>(chunk), from, range.offset, range.bytes});
  return outcome::success();
}

std::uint32_t binomial_reduce::waiting_for(std::vector<std::uint32_t>& peers) const {
  if (!started_ || done()) return 0;
  // The children that have not yet given the chunk the subtree is held up on.
  const auto children = tree_.children();
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (next_chunk_[i] <= completed_) peers.push_back(children[i].rank);
  }
  return 0;
}

bool binomial_reduce::done() const noexcept {
  return started_ && completed_ == layout_.count();
}

}  // namespace vessel::collectives
