#include "collectives/trace_recorder.hpp"

namespace vessel::collectives {

void describe(trace_event& e, collective_op op, dtype type, reduce_op reduction) noexcept {
  const bool reducing = op == collective_op::reduce || op == collective_op::allreduce ||
                        op == collective_op::reduce_scatter;
  e.operation = to_string(op);
  e.element_type = to_string(type);
  e.reduction = reducing ? to_string(reduction) : std::string_view{};
  e.rooted = op == collective_op::broadcast || op == collective_op::reduce ||
             op == collective_op::gather || op == collective_op::scatter;
  e.api = {};
}

}  // namespace vessel::collectives
