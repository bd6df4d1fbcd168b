#pragma once
// Builds the state machine that runs one collective: the bridge from a selection (an operation
// and an algorithm name, collectives/selection.hpp) to an algorithm instance that a driver (the
// collective actor, the simulated network) can run.

#include <memory>
#include <string_view>

#include "collectives/algorithms/algorithm.hpp"
#include "collectives/operation.hpp"
#include "wire/result.hpp"

namespace vessel::collectives {

/// A fresh instance of `name` for `op` (the names algorithm_names(op) lists). Errors:
/// unknown_algorithm for a name `op` has no algorithm for. Parameters are checked by start().
result<std::unique_ptr<algorithm>> make_algorithm(collective_op op, std::string_view name,
                                                  const algorithm_params& params);

}  // namespace vessel::collectives
