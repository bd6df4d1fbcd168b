#pragma once
// stepwise_algorithm: the skeleton shared by algorithms that go round by round with one partner
// per round (recursive doubling, recursive halving, Rabenseifner). A round sends one byte range
// to one peer and receives one byte range from one peer (either may be absent or empty); the
// next round starts once every chunk of this round's receive has been applied. Each range
// travels in chunks of params.chunk_bytes, in order, so a chunk's index says where it goes.
//
// A subclass says what each round does (plan), applies a received chunk (apply) and may act
// at the start of a round (begin_round: e.g. finish an average before the results spread).

#include <cstdint>
#include <vector>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/algorithms/partition.hpp"

namespace vessel::collectives {

struct round_plan {
  static constexpr std::uint32_t nobody = 0xFFFFFFFFu;
  std::uint32_t send_peer = nobody;
  buffer_id send_buffer = buffer_id::output;
  byte_range send{};
  std::uint32_t receive_peer = nobody;
  byte_range receive{};  ///< where the received bytes belong (in the subclass's layout)
};

class stepwise_algorithm : public algorithm {
 public:
  result<void> start(const algorithm_buffers& buffers, std::vector<send_step>& out) final;
  result<receive_status> on_receive(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                                    std::span<const std::byte> data,
                                    std::vector<send_step>& out) final;
  bool done() const noexcept final { return started_ && round_ == rounds(); }
  std::uint32_t waiting_for(std::vector<std::uint32_t>& peers) const final;

 protected:
  explicit stepwise_algorithm(const algorithm_params& params);

  /// Rounds in the schedule; the same number on every rank.
  virtual std::uint32_t rounds() const noexcept = 0;
  virtual round_plan plan(std::uint32_t round) const noexcept = 0;
  /// Checks parameters and buffers and lays out the output (copies the input in, ...).
  virtual result<void> prepare(const algorithm_buffers& buffers) = 0;
  /// Applies received bytes that belong at `where` (a chunk of plan(round).receive).
  virtual result<void> apply(std::uint32_t round, byte_range where,
                             std::span<const std::byte> data) = 0;
  virtual result<void> begin_round(std::uint32_t round) {
    (void)round;
    return outcome::success();
  }

  /// Checks rank < size, size >= 1 and that op is defined on the type.
  result<void> check_params() const noexcept;

  const algorithm_params params_;
  const std::size_t element_bytes_;
  const std::size_t granule_;  ///< chunk size in bytes, whole elements
  algorithm_buffers buffers_{};

 private:
  /// Emits the sends of the current round and moves past rounds with nothing to receive.
  result<void> enter_rounds(std::vector<send_step>& out);

  bool started_ = false;
  std::uint32_t round_ = 0;
  std::uint32_t next_chunk_ = 0;
  std::uint32_t chunks_expected_ = 0;
};

}  // namespace vessel::collectives
