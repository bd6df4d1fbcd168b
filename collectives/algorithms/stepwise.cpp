#include "collectives/algorithms/stepwise.hpp"

#include "collectives/errc.hpp"

namespace vessel::collectives {

stepwise_algorithm::stepwise_algorithm(const algorithm_params& params)
    : params_(params),
      element_bytes_(size_of(params.type) == 0 ? 1 : size_of(params.type)),
      granule_(chunk_granule(params.chunk_bytes, element_bytes_)) {}

result<void> stepwise_algorithm::check_params() const noexcept {
  if (size_of(params_.type) == 0) return errc::unsupported_type;
  if (!supports(params_.type, params_.op)) return errc::unsupported_op;
  if (params_.size == 0 || params_.rank >= params_.size) return errc::invalid_argument;
  // count * element * size must not wrap (allgather's output is that big).
  if (params_.count > static_cast<std::size_t>(-1) / element_bytes_ / params_.size) {
    return errc::invalid_argument;
  }
  return outcome::success();
}

result<void> stepwise_algorithm::start(const algorithm_buffers& buffers,
                                       std::vector<send_step>& out) {
  if (started_) return errc::invalid_argument;
  VESSEL_TRY(prepare(buffers));
  buffers_ = buffers;
  started_ = true;
  round_ = 0;
  return enter_rounds(out);
}

result<void> stepwise_algorithm::enter_rounds(std::vector<send_step>& out) {
  while (round_ < rounds()) {
    VESSEL_TRY(begin_round(round_));
    const round_plan p = plan(round_);
    if (p.send_peer != round_plan::nobody) {
      const std::uint32_t chunks = chunk_count(p.send.bytes, granule_);
      for (std::uint32_t c = 0; c < chunks; ++c) {
        const byte_range piece = chunk_of(p.send, granule_, c);
        out.push_back({p.send_peer, round_, c, p.send_buffer, piece.offset, piece.bytes});
      }
    }
    chunks_expected_ =
        p.receive_peer == round_plan::nobody ? 0 : chunk_count(p.receive.bytes, granule_);
    next_chunk_ = 0;
    if (chunks_expected_ != 0) break;
    ++round_;
  }
  return outcome::success();
}

result<receive_status> stepwise_algorithm::on_receive(std::uint32_t peer, std::uint32_t step,
                                                      std::uint32_t chunk,
                                                      std::span<const std::byte> data,
                                                      std::vector<send_step>& out) {
  if (step >= rounds() || (started_ && step < round_)) return errc::protocol_violation;
  const round_plan p = plan(step);
  if (p.receive_peer != peer || chunk >= chunk_count(p.receive.bytes, granule_)) {
    return errc::protocol_violation;
  }
  const byte_range where = chunk_of(p.receive, granule_, chunk);
  if (data.size() != where.bytes) return errc::protocol_violation;
  if (!started_ || step > round_) return receive_status::not_yet;  // the peer is a round ahead
  if (chunk != next_chunk_) return errc::protocol_violation;       // duplicate or reordered

  VESSEL_TRY(apply(step, where, data));
  if (++next_chunk_ == chunks_expected_) {
    ++round_;
    VESSEL_TRY(enter_rounds(out));
  }
  return receive_status::consumed;
}

std::uint32_t stepwise_algorithm::waiting_for(std::vector<std::uint32_t>& peers) const {
  if (!started_ || done()) return round_;
  const round_plan p = plan(round_);
  if (p.receive_peer != round_plan::nobody) peers.push_back(p.receive_peer);
  return round_;
}

}  // namespace vessel::collectives
