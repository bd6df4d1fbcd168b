#include "wire/errc.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "wire/result.hpp"

namespace vessel::wire {
namespace {

TEST(wire_errc, every_code_has_a_distinct_message_in_the_wire_category) {
  std::set<std::string> messages;
  for (int value = static_cast<int>(errc::header_too_small);
       value <= static_cast<int>(errc::serial_payload_too_large); ++value) {
    std::error_code ec = static_cast<errc>(value);
    EXPECT_EQ(ec.category().name(), std::string{"vessel.wire"});
    EXPECT_NE(ec.message(), "unknown vessel.wire error") << value;
    EXPECT_TRUE(messages.insert(ec.message()).second) << ec.message();
  }
}

TEST(wire_errc, result_carries_either_a_value_or_a_wire_error) {
  result<int> good = 7;
  result<int> bad = make_error_code(errc::crc_mismatch);
  ASSERT_TRUE(good);
  EXPECT_EQ(good.value(), 7);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), errc::crc_mismatch);
  EXPECT_THROW((void)bad.value(), std::system_error);
}

}  // namespace
}  // namespace vessel::wire
