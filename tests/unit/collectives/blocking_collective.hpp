#pragma once
// The blocking communicator call a collective_call describes: the reference the collective
// actor's answers are compared with, in the unit tests and on real ranks (coll_actor_rank).

#include <cstddef>
#include <span>

#include "collectives/collective_driver.hpp"
#include "collectives/communicator.hpp"

namespace vessel::collectives::test_support {

/// Runs `c` through the blocking form of its operation, writing into `out`
/// (collective_driver::output_bytes(c, comm.size()) long).
inline vessel::result<void> run_blocking(communicator& comm, const collective_call& c,
                                         std::span<std::byte> out) {
  call_options o;
  o.root = c.root;
  switch (c.op) {
    case collective_op::barrier: return comm.barrier(o);
    case collective_op::broadcast: return comm.broadcast(c.input, out, c.type, o);
    case collective_op::reduce: return comm.reduce(c.input, out, c.type, c.reduction, o);
    case collective_op::allreduce: return comm.allreduce(c.input, out, c.type, c.reduction, o);
    case collective_op::allgather: return comm.allgather(c.input, out, c.type, o);
    case collective_op::reduce_scatter:
      return comm.reduce_scatter(c.input, out, c.type, c.reduction, o);
    case collective_op::gather: return comm.gather(c.input, out, c.type, o);
    case collective_op::scatter: return comm.scatter(c.input, out, c.type, o);
    case collective_op::alltoall: return comm.alltoall(c.input, out, c.type, o);
  }
  return vessel::outcome::success();
}

}  // namespace vessel::collectives::test_support
