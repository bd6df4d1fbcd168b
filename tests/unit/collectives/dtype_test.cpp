#include "collectives/dtype.hpp"

#include <gtest/gtest.h>

#include <system_error>

#include "collectives/errc.hpp"

namespace vessel::collectives {
namespace {

constexpr dtype all_types[] = {dtype::int8,    dtype::uint8,    dtype::int32,   dtype::uint32,
                               dtype::int64,   dtype::uint64,   dtype::float16, dtype::bfloat16,
                               dtype::float32, dtype::float64};
constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::prod, reduce_op::min,
                                 reduce_op::max, reduce_op::avg,  reduce_op::band,
                                 reduce_op::bor, reduce_op::bxor};

TEST(CollectivesDtype, NamesRoundTrip) {
  for (dtype t : all_types) {
    const auto name = to_string(t);
    EXPECT_NE(name, "unknown");
    EXPECT_EQ(parse_dtype(name), t) << name;
  }
  for (reduce_op op : all_ops) {
    const auto name = to_string(op);
    EXPECT_NE(name, "unknown");
    EXPECT_EQ(parse_reduce_op(name), op) << name;
  }
  EXPECT_EQ(to_string(dtype::bfloat16), "bfloat16");
  EXPECT_EQ(to_string(reduce_op::bxor), "bxor");
}

TEST(CollectivesDtype, ParseRefusesUnknownNames) {
  EXPECT_FALSE(parse_dtype("float"));
  EXPECT_FALSE(parse_dtype(""));
  EXPECT_FALSE(parse_dtype("Float32"));
  EXPECT_FALSE(parse_reduce_op("add"));
  EXPECT_FALSE(parse_reduce_op("sum "));
  EXPECT_EQ(to_string(static_cast<dtype>(200)), "unknown");
  EXPECT_EQ(to_string(static_cast<reduce_op>(200)), "unknown");
}

TEST(CollectivesDtype, SizesAndBitwiseSupport) {
  EXPECT_EQ(size_of(dtype::int8), 1u);
  EXPECT_EQ(size_of(dtype::bfloat16), 2u);
  EXPECT_EQ(size_of(dtype::float16), 2u);
  EXPECT_EQ(size_of(dtype::uint32), 4u);
  EXPECT_EQ(size_of(dtype::float64), 8u);
  EXPECT_TRUE(supports(dtype::uint8, reduce_op::bxor));
  EXPECT_FALSE(supports(dtype::float32, reduce_op::band));
  EXPECT_FALSE(supports(dtype::bfloat16, reduce_op::bor));
  EXPECT_TRUE(supports(dtype::float16, reduce_op::avg));
}

TEST(CollectivesErrc, CodesHaveCategoryAndMessages) {
  const std::error_code ec = errc::unsupported_op;
  EXPECT_EQ(ec.category().name(), std::string{"vessel.collectives"});
  EXPECT_NE(ec.message().find("operator"), std::string::npos);
  EXPECT_NE(std::error_code{errc::protocol_violation}.message(), ec.message());
  EXPECT_EQ(std::error_code{errc::size_mismatch}, errc::size_mismatch);
}

}  // namespace
}  // namespace vessel::collectives
