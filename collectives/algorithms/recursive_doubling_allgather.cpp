#include "collectives/algorithms/recursive_doubling_allgather.hpp"

#include <cstring>

#include "collectives/errc.hpp"
#include "wire/copy_bytes.hpp"

namespace vessel::collectives {

recursive_doubling_allgather::recursive_doubling_allgather(const algorithm_params& params)
    : stepwise_algorithm(params), fold_(params.size), block_bytes_(params.count * element_bytes_) {}

byte_range recursive_doubling_allgather::carried(std::uint32_t first,
                                                 std::uint32_t last) const noexcept {
  const std::size_t begin = fold_.first_old(first) * block_bytes_;
  const std::size_t end = fold_.first_old(last) * block_bytes_;
  return {begin, end - begin};
}

round_plan recursive_doubling_allgather::plan(std::uint32_t round) const noexcept {
  round_plan p;
  const std::uint32_t rank = params_.rank;
  const auto role = fold_.role_of(rank);
  const byte_range all{0, block_bytes_ * fold_.size};
  if (round == 0) {
    if (role == fold_plan::role::extra) {
      p.send_peer = rank + 1;
      p.send = {rank * block_bytes_, block_bytes_};
    } else if (role == fold_plan::role::folded) {
      p.receive_peer = rank - 1;
      p.receive = {(rank - 1) * block_bytes_, block_bytes_};
    }
  } else if (round <= fold_.levels) {
    if (role == fold_plan::role::extra) return p;
    const std::uint32_t width = 1u << (round - 1);
    const std::uint32_t me = fold_.new_rank(rank);
    const std::uint32_t partner = me ^ width;
    const std::uint32_t mine = me & ~(width - 1);
    const std::uint32_t theirs = partner & ~(width - 1);
    p.send_peer = p.receive_peer = fold_.old_rank(partner);
    p.send = carried(mine, mine + width);
    p.receive = carried(theirs, theirs + width);
  } else {
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

result<void> recursive_doubling_allgather::prepare(const algorithm_buffers& buffers) {
  VESSEL_TRY(check_params());
  if (buffers.input.size() < block_bytes_ || buffers.output.size() < block_bytes_ * params_.size) {
    return errc::size_mismatch;
  }
  std::byte* mine = buffers.output.data() + params_.rank * block_bytes_;
  if (block_bytes_ != 0 && buffers.input.data() != mine) {
    std::memmove(mine, buffers.input.data(), block_bytes_);
  }
  return outcome::success();
}

result<void> recursive_doubling_allgather::apply(std::uint32_t round, byte_range where,
                                                 std::span<const std::byte> data) {
  (void)round;
  wire::copy_bytes(buffers_.output.data() + where.offset, data.data(), data.size());
  return outcome::success();
}

}  // namespace vessel::collectives
