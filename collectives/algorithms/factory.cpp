#include "collectives/algorithms/factory.hpp"

#include "collectives/algorithms/binomial_broadcast.hpp"
#include "collectives/algorithms/binomial_gather.hpp"
#include "collectives/algorithms/binomial_reduce.hpp"
#include "collectives/algorithms/binomial_scatter.hpp"
#include "collectives/algorithms/chain_broadcast.hpp"
#include "collectives/algorithms/dissemination_barrier.hpp"
#include "collectives/algorithms/pairwise_alltoall.hpp"
#include "collectives/algorithms/rabenseifner_allreduce.hpp"
#include "collectives/algorithms/recursive_doubling_allgather.hpp"
#include "collectives/algorithms/recursive_doubling_allreduce.hpp"
#include "collectives/algorithms/ring_allgather.hpp"
#include "collectives/algorithms/ring_allreduce.hpp"
#include "collectives/algorithms/ring_reduce_scatter.hpp"
#include "collectives/errc.hpp"

namespace vessel::collectives {

result<std::unique_ptr<algorithm>> make_algorithm(collective_op op, std::string_view name,
                                                  const algorithm_params& params) {
  std::unique_ptr<algorithm> made;
  switch (op) {
    case collective_op::barrier:
      if (name == "dissemination") made = std::make_unique<dissemination_barrier>(params);
      break;
    case collective_op::broadcast:
      if (name == "binomial") made = std::make_unique<binomial_broadcast>(params);
      if (name == "chain") made = std::make_unique<chain_broadcast>(params);
      break;
    case collective_op::reduce:
      if (name == "binomial") made = std::make_unique<binomial_reduce>(params);
      break;
    case collective_op::allreduce:
      if (name == "ring") made = std::make_unique<ring_allreduce>(params);
      if (name == "recursive_doubling") {
        made = std::make_unique<recursive_doubling_allreduce>(params);
      }
      if (name == "rabenseifner") made = std::make_unique<rabenseifner_allreduce>(params);
      break;
    case collective_op::allgather:
      if (name == "ring") made = std::make_unique<ring_allgather>(params);
      if (name == "recursive_doubling") {
        made = std::make_unique<recursive_doubling_allgather>(params);
      }
      break;
    case collective_op::reduce_scatter:
      if (name == "ring") made = std::make_unique<ring_reduce_scatter>(params);
      break;
    case collective_op::gather:
      if (name == "binomial") made = std::make_unique<binomial_gather>(params);
      break;
    case collective_op::scatter:
      if (name == "binomial") made = std::make_unique<binomial_scatter>(params);
      break;
    case collective_op::alltoall:
      if (name == "pairwise") made = std::make_unique<pairwise_alltoall>(params);
      break;
  }
  if (!made) return errc::unknown_algorithm;
  return made;
}

}  // namespace vessel::collectives
