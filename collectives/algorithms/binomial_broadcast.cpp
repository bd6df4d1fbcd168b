#include "collectives/algorithms/binomial_broadcast.hpp"

#include <array>

#include "collectives/algorithms/algorithm_checks.hpp"
#include "collectives/algorithms/binomial_tree.hpp"

namespace vessel::collectives {

binomial_broadcast::binomial_broadcast(const algorithm_params& params) noexcept
    : tree_broadcast(params) {
  if (!params_valid(params)) return;  // start() reports it
  const binomial_tree tree(params.rank, params.size, params.root);
  // The largest subtree first: it is the longest path still to go.
  std::array<std::uint32_t, 32> children{};
  const auto kids = tree.children();
  for (std::size_t i = 0; i < kids.size(); ++i) children[i] = kids[kids.size() - 1 - i].rank;
  set_shape(tree.parent(), std::span(children.data(), kids.size()));
}

}  // namespace vessel::collectives
