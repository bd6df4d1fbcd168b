// Numbers read from VESSEL_* variables: what is accepted, and what an error says.

#include <gtest/gtest.h>

#include <string>

#include "actors/env.hpp"
#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

TEST(env_byte_count, an_unset_variable_gives_the_fallback_and_zero_is_a_count) {
  EXPECT_EQ(env_byte_count(env_view::from_map({}), "VESSEL_PULL_BYTES", 4096).value(), 4096u);
  const auto zero = env_view::from_map({{"VESSEL_PULL_BYTES", "0"}});
  EXPECT_EQ(env_byte_count(zero, "VESSEL_PULL_BYTES", 4096).value(), 0u);
  const auto large = env_view::from_map({{"VESSEL_PULL_BYTES", "18446744073709551615"}});
  EXPECT_EQ(env_byte_count(large, "VESSEL_PULL_BYTES", 1).value(), ~std::size_t{0});
}

TEST(env_byte_count, anything_but_decimal_digits_is_refused_naming_the_variable_and_value) {
  for (const char* value : {"", "1M", "-1", " 5", "5 ", "0x10", "18446744073709551616"}) {
    const auto env = env_view::from_map({{"VESSEL_LEND_BYTES", value}});
    const auto n = env_byte_count(env, "VESSEL_LEND_BYTES", 7);
    ASSERT_FALSE(n) << "'" << value << "' accepted";
    EXPECT_EQ(n.error().code, make_error_code(errc::malformed_number));
    EXPECT_EQ(n.error().detail, std::string{"VESSEL_LEND_BYTES="} + value + ": not a byte count");
  }
}

}  // namespace
}  // namespace vessel::actors
