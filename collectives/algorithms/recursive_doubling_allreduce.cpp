#include "collectives/algorithms/recursive_doubling_allreduce.hpp"

#include <cstring>

#include "collectives/errc.hpp"
#include "collectives/reduce.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::collectives {

recursive_doubling_allreduce::recursive_doubling_allreduce(const algorithm_params& params)
    : stepwise_algorithm(params), fold_(params.size), bytes_(params.count * element_bytes_) {}

std::size_t recursive_doubling_allreduce::scratch_bytes() const noexcept {
  return bytes_ < granule_ ? bytes_ : granule_;
}

round_plan recursive_doubling_allreduce::plan(std::uint32_t round) const noexcept {
  round_plan p;
  const byte_range all{0, bytes_};
  const std::uint32_t rank = params_.rank;
  const auto role = fold_.role_of(rank);
  if (round == 0) {  // fold: an extra hands its vector to the odd rank above it
    if (role == fold_plan::role::extra) {
      p.send_peer = rank + 1;
      p.send = all;
    } else if (role == fold_plan::role::folded) {
      p.receive_peer = rank - 1;
      p.receive = all;
    }
  } else if (round <= fold_.levels) {
    if (role == fold_plan::role::extra) return p;
    const std::uint32_t partner = fold_.old_rank(fold_.new_rank(rank) ^ (1u << (round - 1)));
    p.send_peer = p.receive_peer = partner;
    p.send = p.receive = all;
  } else {  // unfold: the result goes back to the extra
    if (role == fold_plan::role::folded) {
      p.send_peer = rank - 1;
      p.send = all;
    } else if (role == fold_plan::role::extra) {
      p.receive_peer = rank + 1;
      p.receive = all;
    }
  }
  return p;
}

result<void> recursive_doubling_allreduce::prepare(const algorithm_buffers& buffers) {
  VESSEL_TRY(check_params());
  if (buffers.input.size() < bytes_ || buffers.output.size() < bytes_ ||
      buffers.scratch.size() < scratch_bytes()) {
    return errc::size_mismatch;
  }
  if (bytes_ != 0 && buffers.input.data() != buffers.output.data()) {
    std::memmove(buffers.output.data(), buffers.input.data(), bytes_);
  }
  return outcome::success();
}

result<void> recursive_doubling_allreduce::apply(std::uint32_t round, byte_range where,
                                                 std::span<const std::byte> data) {
  const auto mine = buffers_.output.subspan(where.offset, where.bytes);
  if (round == fold_.levels + 1) {  // the finished result
    wire::copy_bytes(mine.data(), data.data(), data.size());
    return outcome::success();
  }
  // The lower new rank's data goes first on both sides (in the fold, the extra's), so both
  // partners compute the same bits even where op is not bitwise commutative (min of -0, +0).
  const std::uint32_t rank = params_.rank;
  const bool peer_first = round == 0 || fold_.new_rank(rank) & (1u << (round - 1));
  if (!peer_first) return reduce_into(mine, data, params_.type, params_.op);
  const auto tmp = buffers_.scratch.first(where.bytes);
  wire::copy_bytes(tmp.data(), data.data(), data.size());
  VESSEL_TRY(reduce_into(tmp, mine, params_.type, params_.op));
  wire::copy_bytes(mine.data(), tmp.data(), tmp.size());
  return outcome::success();
}

result<void> recursive_doubling_allreduce::begin_round(std::uint32_t round) {
  // Average once, where the sum is complete, before it goes back to the extras.
  if (round != fold_.levels + 1 || params_.op != reduce_op::avg || bytes_ == 0 ||
      fold_.role_of(params_.rank) == fold_plan::role::extra) {
    return outcome::success();
  }
  return finish_average(buffers_.output.first(bytes_), params_.type, params_.size);
}

}  // namespace vessel::collectives
