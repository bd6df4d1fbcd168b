#pragma once
// The collective operations, named as VESSEL_ALGO_<OP> and the algorithm tables name them.

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace vessel::collectives {

enum class collective_op : std::uint8_t {
  barrier,
  broadcast,
  reduce,
  allreduce,
  allgather,
  reduce_scatter,
  gather,
  scatter,
  alltoall,
};

inline constexpr std::array<collective_op, 9> all_collective_ops{
    collective_op::barrier,   collective_op::broadcast,      collective_op::reduce,
    collective_op::allreduce, collective_op::allgather,      collective_op::reduce_scatter,
    collective_op::gather,    collective_op::scatter,        collective_op::alltoall};

constexpr std::string_view to_string(collective_op op) noexcept {
  switch (op) {
    case collective_op::barrier: return "barrier";
    case collective_op::broadcast: return "broadcast";
    case collective_op::reduce: return "reduce";
    case collective_op::allreduce: return "allreduce";
    case collective_op::allgather: return "allgather";
    case collective_op::reduce_scatter: return "reduce_scatter";
    case collective_op::gather: return "gather";
    case collective_op::scatter: return "scatter";
    case collective_op::alltoall: return "alltoall";
  }
  return "unknown";
}

constexpr std::optional<collective_op> parse_collective_op(std::string_view name) noexcept {
  for (collective_op op : all_collective_ops) {
    if (to_string(op) == name) return op;
  }
  return std::nullopt;
}

}  // namespace vessel::collectives
