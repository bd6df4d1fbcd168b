#include "collectives/algorithms/chain_broadcast.hpp"

#include "collectives/algorithms/algorithm_checks.hpp"

namespace vessel::collectives {

chain_broadcast::chain_broadcast(const algorithm_params& params) noexcept : tree_broadcast(params) {
  if (!params_valid(params)) return;  // start() reports it
  const std::uint32_t p = params.size;
  const std::uint32_t vrank = (params.rank + p - params.root) % p;
  const std::uint32_t parent = (params.rank + p - 1) % p;
  const std::uint32_t next = (params.rank + 1) % p;
  if (vrank + 1 < p) {
    set_shape(parent, std::span(&next, 1));
  } else {
    set_shape(parent, {});
  }
}

}  // namespace vessel::collectives
