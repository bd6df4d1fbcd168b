#pragma once
// Ring allreduce (large vectors): reduce-scatter then allgather round the ring, chunks pipelined.
// Each rank sends 2 (p-1)/p n bytes in 2 (p-1) steps: bandwidth-optimal, latency linear in p.
// params.count is the whole vector; input may alias output.
// The schedule is ring_pipeline's (collectives/algorithms/ring_pipeline.hpp).

#include "collectives/algorithms/ring_pipeline.hpp"

namespace vessel::collectives {

class ring_allreduce final : public ring_pipeline {
 public:
  explicit ring_allreduce(const algorithm_params& params)
      : ring_pipeline(kind::allreduce, params) {}
  std::string_view name() const noexcept override { return "ring"; }
};

}  // namespace vessel::collectives
