#include "collectives/algorithms/rabenseifner_allreduce.hpp"

#include <cstring>

#include "collectives/errc.hpp"
#include "collectives/reduce.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::collectives {

rabenseifner_allreduce::rabenseifner_allreduce(const algorithm_params& params)
    : stepwise_algorithm(params), fold_(params.size), bytes_(params.count * element_bytes_) {}

byte_range rabenseifner_allreduce::blocks(std::uint32_t first, std::uint32_t last) const noexcept {
  const byte_range a = block_range(params_.count, fold_.pof2, first, element_bytes_);
  const std::size_t end = last == fold_.pof2
                              ? bytes_
                              : block_range(params_.count, fold_.pof2, last, element_bytes_).offset;
  return {a.offset, end - a.offset};
}

round_plan rabenseifner_allreduce::plan(std::uint32_t round) const noexcept {
  round_plan p;
  const byte_range all{0, bytes_};
  const std::uint32_t rank = params_.rank;
  const auto role = fold_.role_of(rank);
  const std::uint32_t levels = fold_.levels;
  if (round == 0) {
    if (role == fold_plan::role::extra) {
      p.send_peer = rank + 1;
      p.send = all;
    } else if (role == fold_plan::role::folded) {
      p.receive_peer = rank - 1;
      p.receive = all;
    }
    return p;
  }
  if (round == 2 * levels + 1) {
    if (role == fold_plan::role::folded) {
      p.send_peer = rank - 1;
      p.send = all;
    } else if (role == fold_plan::role::extra) {
      p.receive_peer = rank + 1;
      p.receive = all;
    }
    return p;
  }
  if (role == fold_plan::role::extra) return p;
  const std::uint32_t me = fold_.new_rank(rank);
  if (round <= levels) {  // halving: window of 2 * half blocks around me, keep my side
    const std::uint32_t half = fold_.pof2 >> round;
    const std::uint32_t low = me & ~(2 * half - 1);
    const bool upper = (me & half) != 0;
    const std::uint32_t keep = upper ? low + half : low;
    const std::uint32_t give = upper ? low : low + half;
    p.send_peer = p.receive_peer = fold_.old_rank(me ^ half);
    p.send = blocks(give, give + half);
    p.receive = blocks(keep, keep + half);
  } else {  // doubling: my window of `width` blocks against the partner's
    const std::uint32_t width = 1u << (round - levels - 1);
    const std::uint32_t partner = me ^ width;
    const std::uint32_t mine = me & ~(width - 1);
    const std::uint32_t theirs = partner & ~(width - 1);
    p.send_peer = p.receive_peer = fold_.old_rank(partner);
    p.send = blocks(mine, mine + width);
    p.receive = blocks(theirs, theirs + width);
  }
  return p;
}

result<void> rabenseifner_allreduce::prepare(const algorithm_buffers& buffers) {
  VESSEL_TRY(check_params());
  if (buffers.input.size() < bytes_ || buffers.output.size() < bytes_) return errc::size_mismatch;
  if (bytes_ != 0 && buffers.input.data() != buffers.output.data()) {
    std::memmove(buffers.output.data(), buffers.input.data(), bytes_);
  }
  return outcome::success();
}

result<void> rabenseifner_allreduce::apply(std::uint32_t round, byte_range where,
                                           std::span<const std::byte> data) {
  const auto mine = buffers_.output.subspan(where.offset, where.bytes);
  if (round == 0 || round <= fold_.levels) {
    return reduce_into(mine, data, params_.type, params_.op);
  }
  wire::copy_bytes(mine.data(), data.data(), data.size());  // doubling and unfold: final values
  return outcome::success();
}

result<void> rabenseifner_allreduce::begin_round(std::uint32_t round) {
  // The owner averages its block once it is fully reduced, before it spreads.
  if (round != fold_.levels + 1 || params_.op != reduce_op::avg ||
      fold_.role_of(params_.rank) == fold_plan::role::extra) {
    return outcome::success();
  }
  const std::uint32_t me = fold_.new_rank(params_.rank);
  const byte_range own = blocks(me, me + 1);
  if (own.bytes == 0) return outcome::success();
  return finish_average(buffers_.output.subspan(own.offset, own.bytes), params_.type, params_.size);
}

}  // namespace vessel::collectives
