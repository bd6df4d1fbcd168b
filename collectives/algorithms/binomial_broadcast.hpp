#pragma once
// Binomial tree broadcast from any root: ceil(log2 p) levels, each rank receives the message
// once; with chunking the levels overlap. Latency ~ ceil(log2 p) * (alpha + chunk * beta) +
// (chunks - 1) * (alpha + chunk * beta) * fan-out. Best for small and medium messages.

#include <string_view>

#include "collectives/algorithms/tree_broadcast.hpp"

namespace vessel::collectives {

class binomial_broadcast final : public tree_broadcast {
 public:
  explicit binomial_broadcast(const algorithm_params& params) noexcept;
  std::string_view name() const noexcept override { return "binomial_broadcast"; }
};

}  // namespace vessel::collectives
