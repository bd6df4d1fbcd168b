#include "collectives/dtype.hpp"

#include <array>
#include <utility>

namespace vessel::collectives {
namespace {

constexpr std::array<std::pair<dtype, std::string_view>, 10> dtype_names{{
    {dtype::int8, "int8"},
    {dtype::uint8, "uint8"},
    {dtype::int32, "int32"},
    {dtype::uint32, "uint32"},
    {dtype::int64, "int64"},
    {dtype::uint64, "uint64"},
    {dtype::float16, "float16"},
    {dtype::bfloat16, "bfloat16"},
    {dtype::float32, "float32"},
    {dtype::float64, "float64"},
}};

constexpr std::array<std::pair<reduce_op, std::string_view>, 8> op_names{{
    {reduce_op::sum, "sum"},
    {reduce_op::prod, "prod"},
    {reduce_op::min, "min"},
    {reduce_op::max, "max"},
    {reduce_op::avg, "avg"},
    {reduce_op::band, "band"},
    {reduce_op::bor, "bor"},
    {reduce_op::bxor, "bxor"},
}};

}  // namespace

std::string_view to_string(dtype t) noexcept {
  for (const auto& [value, name] : dtype_names) {
    if (value == t) return name;
  }
  return "unknown";
}

std::string_view to_string(reduce_op op) noexcept {
  for (const auto& [value, name] : op_names) {
    if (value == op) return name;
  }
  return "unknown";
}

std::optional<dtype> parse_dtype(std::string_view name) noexcept {
  for (const auto& [value, text] : dtype_names) {
    if (text == name) return value;
  }
  return std::nullopt;
}

std::optional<reduce_op> parse_reduce_op(std::string_view name) noexcept {
  for (const auto& [value, text] : op_names) {
    if (text == name) return value;
  }
  return std::nullopt;
}

}  // namespace vessel::collectives
