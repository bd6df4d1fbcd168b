#pragma once
// Dissemination barrier (Hensgen, Finkel and Manber 1988): in round k each rank signals
// rank + 2^k and waits for rank - 2^k (mod p); after ceil(log2 p) rounds every rank has heard,
// directly or not, from every other. Zero-byte messages, step = round. Works for any p.
//
// A peer may be a round ahead of us (it heard its own round-k signal first): its signal is
// recorded when it arrives and counted when our round reaches it, so the driver keeps nothing.

#include <cstdint>
#include <string_view>

#include "collectives/algorithms/algorithm.hpp"

namespace vessel::collectives {

class dissemination_barrier final : public algorithm {
 public:
  explicit dissemination_barrier(const algorithm_params& params) noexcept;

  std::string_view name() const noexcept override { return "dissemination_barrier"; }
  result<void> start(const algorithm_buffers& buffers, std::vector<send_step>& out) override;
  result<receive_status> on_receive(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                                    std::span<const std::byte> data,
                                    std::vector<send_step>& out) override;
  bool done() const noexcept override { return started_ && round_ == rounds_; }
  std::uint32_t waiting_for(std::vector<std::uint32_t>& peers) const override;

  std::uint32_t rounds() const noexcept { return rounds_; }

 private:
  /// Sends the signals of every round whose predecessor's signal is in.
  void advance(std::vector<send_step>& out);

  const algorithm_params params_;
  std::uint32_t rounds_ = 0;  ///< ceil(log2 p)
  std::uint32_t round_ = 0;   ///< the round whose incoming signal we wait for
  std::uint64_t heard_ = 0;   ///< bit k: round k's signal arrived
  bool started_ = false;
};

}  // namespace vessel::collectives
