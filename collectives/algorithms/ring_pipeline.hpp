#pragma once
// ring_pipeline: the ring schedule behind ring allreduce, ring reduce_scatter and ring
// allgather. Rank r sends only to r + 1 and receives only from r - 1. The vector is cut into p
// blocks and each block into chunks; a chunk moves on as soon as it arrives (reduced or
// copied), so chunks of consecutive steps overlap on the ring and a large vector streams at
// link bandwidth after one step of latency per hop.
//
// - reduce-scatter phase, p - 1 steps: at step s rank r sends block (r - s + shift) and receives
//   block (r - s - 1 + shift), reduces it in and sends it on at step s + 1; after the last step
//   it owns one block fully reduced.
// - allgather phase, p - 1 steps: the owned blocks go round once, copied at each hop.
// Allreduce runs both (steps 0..p-2, then p-1..2p-3), reduce_scatter the first, allgather the
// second. Each block is reduced along one chain and then copied, so floats are bit-identical on
// every rank. With FIFO links a ring never needs not_yet once started.

#include <cstdint>
#include <optional>
#include <vector>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/algorithms/partition.hpp"

namespace vessel::collectives {

class ring_pipeline : public algorithm {
 public:
  enum class kind : std::uint8_t { allreduce, reduce_scatter, allgather };

  result<void> start(const algorithm_buffers& buffers, std::vector<send_step>& out) final;
  result<receive_status> on_receive(std::uint32_t peer, std::uint32_t step, std::uint32_t chunk,
                                    std::span<const std::byte> data,
                                    std::vector<send_step>& out) final;
  bool done() const noexcept final { return started_ && received_ == expected_; }
  std::optional<std::uint64_t> chunks_to_receive() const noexcept final { return expected_; }
  std::uint32_t waiting_for(std::vector<std::uint32_t>& peers) const final;
  std::size_t scratch_bytes() const noexcept override;
  /// The copying steps' chunks (allgather's, allreduce's second phase) land in the output.
  std::span<std::byte> landing(std::uint32_t peer, std::uint32_t step,
                               std::uint32_t chunk) const noexcept final;
  /// The reducing steps' chunks that go to the output (allreduce's first phase, reduce_scatter's
  /// last step) are reduced where they land, when the input does not overlap the output.
  reduce_landing reducing_landing(std::uint32_t peer, std::uint32_t step,
                                  std::uint32_t chunk) const noexcept final;

 protected:
  ring_pipeline(kind k, const algorithm_params& params);

 private:
  std::uint32_t steps() const noexcept;
  bool is_reducing_step(std::uint32_t step) const noexcept;
  /// The block rank r sends / receives at `step`.
  std::uint32_t block_sent(std::uint32_t step) const noexcept;
  std::uint32_t block_received(std::uint32_t step) const noexcept;
  /// Block b's bytes in the layout of the full vector.
  byte_range block(std::uint32_t b) const noexcept;
  /// Where chunk (`peer`, `step`, `chunk`) lies in the full vector, if it is one the ring
  /// receives (from the left, a step and chunk that exist, not empty).
  std::optional<byte_range> incoming(std::uint32_t peer, std::uint32_t step,
                                     std::uint32_t chunk) const noexcept;
  result<void> apply(std::uint32_t step, std::uint32_t chunk, byte_range where,
                     std::span<const std::byte> data, std::vector<send_step>& out);
  void send_chunk(std::uint32_t step, std::uint32_t chunk, buffer_id buffer, std::size_t offset,
                  std::size_t bytes, std::vector<send_step>& out) const;

  const kind kind_;
  const algorithm_params params_;
  const std::size_t element_bytes_;
  const std::size_t granule_;
  std::uint32_t left_ = 0;
  std::uint32_t right_ = 0;
  algorithm_buffers buffers_{};
  bool started_ = false;
  bool input_apart_ = false;  ///< the input does not overlap the output (fixed by start())
  std::uint64_t received_ = 0;
  std::uint64_t expected_ = 0;
  std::vector<std::uint32_t> next_chunk_;  ///< per step: chunks arrive in order per step
};

}  // namespace vessel::collectives
