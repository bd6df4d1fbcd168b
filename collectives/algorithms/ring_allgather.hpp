#pragma once
// Ring allgather: p - 1 pipelined steps round the ring, each block copied at each hop.
// params.count is one rank's block: the input holds count elements, the output size * count with
// block r at r * count; the input may already sit there (in place). Each rank sends p - 1 blocks.
// The schedule is ring_pipeline's (collectives/algorithms/ring_pipeline.hpp).

#include "collectives/algorithms/ring_pipeline.hpp"

namespace vessel::collectives {

class ring_allgather final : public ring_pipeline {
 public:
  explicit ring_allgather(const algorithm_params& params)
      : ring_pipeline(kind::allgather, params) {}
  std::string_view name() const noexcept override { return "ring"; }
};

}  // namespace vessel::collectives
