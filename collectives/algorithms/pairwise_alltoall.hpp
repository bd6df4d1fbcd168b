#pragma once
// Pairwise-exchange alltoall: in each round a rank sends one block to one peer and receives one
// block from one peer, so every link carries one message at a time and no rank is flooded.
// p - 1 rounds: partner rank XOR r when p is a power of two (each round pairs ranks
// symmetrically), otherwise send to rank + r and receive from rank - r (mod p). Blocks are
// chunked; a round begins when the previous round's incoming block is complete.
//
// Buffers: count is one block (elements for one destination); input and output hold p blocks,
// block j of input goes to rank j, block j of output came from rank j.
// In place (input aliases output, on every rank alike): a block may only be overwritten after it
// was sent, so rounds must pair ranks symmetrically; for p not a power of two that takes p
// rounds (partner = r - rank mod p; each rank idles in the round where it would pair with
// itself), and a block that arrives a round early gets not_yet. Out of place, an early block is
// stored at once, and sends read input, which is never written, so a driver may send without
// copying; in place a sent region is overwritten by the partner's block in the same round.

#include <cstdint>
#include <string_view>
#include <vector>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/algorithms/chunk_layout.hpp"

namespace vessel::collectives {

class pairwise_alltoall final : public algorithm {
 public:
  explicit pairwise_alltoall(const algorithm_params& params);

  std::string_view name() const noexcept override { return "pairwise_alltoall"; }
  result<void> start(const algorithm_buffers& buffers, std::vector<send_step>& out) override;
  result<receive_status> on_receive(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                                    std::span<const std::byte> data,
                                    std::vector<send_step>& out) override;
  /// Not in place: a peer's chunk has its place in output's block for that peer (in place the
  /// region still holds what we send there until our round with it, so nothing lands).
  std::span<std::byte> landing(std::uint32_t peer, std::uint32_t step,
                               std::uint32_t chunk) const noexcept override;
  bool done() const noexcept override { return started_ && round_ == rounds_; }
  std::uint32_t waiting_for(std::vector<std::uint32_t>& peers) const override;

 private:
  enum class pairing : std::uint8_t { xor_partner, shifted, symmetric_shifted };

  std::uint32_t send_to(std::uint32_t round) const noexcept;
  std::uint32_t receive_from(std::uint32_t round) const noexcept;
  /// The round in which `peer` sends its block to this rank.
  std::uint32_t round_of(std::uint32_t peer) const noexcept;
  /// Starts every round whose predecessor is complete; emits the round's sends.
  void advance(std::vector<send_step>& out);
  void send_round(std::vector<send_step>& out) const;

  const algorithm_params params_;
  pairing pairing_ = pairing::xor_partner;
  std::uint32_t first_round_ = 1;
  std::uint32_t rounds_ = 0;  ///< one past the last round
  std::uint32_t round_ = 0;   ///< current round
  std::size_t block_ = 0;     ///< bytes
  chunk_layout layout_;       ///< of one block
  algorithm_buffers buffers_;
  buffer_id send_buffer_ = buffer_id::input;
  bool in_place_ = false;
  std::vector<std::uint32_t> received_;  ///< per peer: chunks in (sized once, at construction)
  bool started_ = false;
};

}  // namespace vessel::collectives
