#include "collectives/algorithms/dissemination_barrier.hpp"

#include "collectives/algorithms/algorithm_checks.hpp"

namespace vessel::collectives {

dissemination_barrier::dissemination_barrier(const algorithm_params& params) noexcept
    : params_(params) {
  if (!params_valid(params)) return;
  while ((std::uint64_t{1} << rounds_) < params.size) ++rounds_;
}

result<void> dissemination_barrier::start(const algorithm_buffers&, std::vector<send_step>& out) {
  if (started_) return errc::invalid_argument;
  VESSEL_TRY(check_params(params_));
  started_ = true;
  if (rounds_ > 0) {
    out.push_back({(params_.rank + 1) % params_.size, 0, 0, buffer_id::output, 0, 0});
  }
  advance(out);
  return outcome::success();
}

result<receive_status> dissemination_barrier::on_receive(std::uint32_t peer, std::uint32_t step,
                                                         std::uint32_t chunk,
                                                         std::span<const std::byte> data,
                                                         std::vector<send_step>& out) {
  if (!started_) return receive_status::not_yet;
  const std::uint32_t p = params_.size;
  // Round `step` comes from rank - 2^step, once, empty; the distances 2^k < p are distinct mod p.
  if (step >= rounds_ || chunk != 0 || !data.empty() ||
      peer != (params_.rank + p - (std::uint32_t{1} << step) % p) % p ||
      (heard_ >> step & 1) != 0) {
    return protocol_violation();
  }
  heard_ |= std::uint64_t{1} << step;
  advance(out);
  return receive_status::consumed;
}

std::uint32_t dissemination_barrier::waiting_for(std::vector<std::uint32_t>& peers) const {
  if (!started_ || done()) return round_;
  const std::uint32_t p = params_.size;
  peers.push_back((params_.rank + p - (std::uint32_t{1} << round_) % p) % p);
  return round_;
}

void dissemination_barrier::advance(std::vector<send_step>& out) {
  const std::uint32_t p = params_.size;
  while (round_ < rounds_ && (heard_ >> round_ & 1) != 0) {
    ++round_;
    if (round_ < rounds_) {
      const std::uint32_t to = (params_.rank + (std::uint32_t{1} << round_)) % p;
      out.push_back({to, round_, 0, buffer_id::output, 0, 0});
    }
  }
}

}  // namespace vessel::collectives
