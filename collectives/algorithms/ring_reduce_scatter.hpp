#pragma once
// Ring reduce_scatter: p - 1 pipelined steps round the ring; rank r ends with block r of the
// reduction. params.count is one rank's block: the input holds size * count elements, the output
// count. The output may alias the input's block r (NCCL in place) or its start (MPI); scratch
// holds one chunk. Each rank sends (p-1)/p of the input.
// The schedule is ring_pipeline's (collectives/algorithms/ring_pipeline.hpp).

#include "collectives/algorithms/ring_pipeline.hpp"

namespace vessel::collectives {

class ring_reduce_scatter final : public ring_pipeline {
 public:
  explicit ring_reduce_scatter(const algorithm_params& params)
      : ring_pipeline(kind::reduce_scatter, params) {}
  std::string_view name() const noexcept override { return "ring"; }
};

}  // namespace vessel::collectives
