// The pieces of collective retries after a rank restart that need no ranks: the attempt bits of
// the tag (communicator.hpp's layout) and the rejoin record a survivor publishes.

#include <gtest/gtest.h>

#include <cstdint>

#include "collectives/communicator.hpp"
#include "collectives/errc.hpp"

namespace vessel::collectives {
namespace {

TEST(collective_tag, attempt_has_its_own_bits) {
  const std::uint64_t t = collective_tag(5, 1234, 3);
  EXPECT_EQ(t >> 62, 3u);  // reserved + communicator traffic
  EXPECT_EQ((t >> 48) & max_communicator_id, 5u);
  EXPECT_EQ((t >> attempt_shift) & max_attempt, 3u);
  EXPECT_EQ(t & ((std::uint64_t{1} << attempt_shift) - 1), 1234u);
  // Attempt 0 is the tag the collectives always had for small sequence numbers.
  EXPECT_EQ(collective_tag(5, 1234), collective_tag(5, 1234, 0));
}

TEST(collective_tag, attempts_of_one_collective_never_share_a_tag) {
  for (std::uint64_t a = 0; a < max_attempt; ++a) {
    EXPECT_NE(collective_tag(1, 7, a), collective_tag(1, 7, a + 1));
  }
  // Neither the sequence nor the attempt spill into the other or into the communicator id.
  const std::uint64_t last_sequence = (std::uint64_t{1} << attempt_shift) - 1;
  EXPECT_EQ((collective_tag(1, last_sequence, 0) >> attempt_shift) & max_attempt, 0u);
  EXPECT_EQ((collective_tag(1, 0, max_attempt) >> 48) & max_communicator_id, 1u);
  EXPECT_EQ(collective_tag(1, 9, max_attempt + 1), collective_tag(1, 9, 0));  // mod 256
}

TEST(rejoin_record, round_trips) {
  const rejoin_record r{42, 3};
  EXPECT_EQ(r.encode(), "42 3");
  auto back = rejoin_record::decode(r.encode());
  ASSERT_TRUE(back);
  EXPECT_EQ(back.value(), r);
  const rejoin_record big{~std::uint64_t{0}, ~std::uint64_t{0}};
  auto big_back = rejoin_record::decode(big.encode());
  ASSERT_TRUE(big_back);
  EXPECT_EQ(big_back.value(), big);
}

TEST(rejoin_record, refuses_anything_else) {
  for (const char* bad : {"", "42", "42 ", " 42 3", "42  3", "42 3 ", "42 x", "-1 3", "4a 3",
                          "18446744073709551616 0", "42 3 7"}) {
    auto r = rejoin_record::decode(bad);
    ASSERT_FALSE(r) << "'" << bad << "'";
    EXPECT_EQ(r.error(), make_error_code(errc::protocol_violation)) << bad;
  }
}

TEST(rejoin_record, key_names_rank_restart_and_survivor) {
  EXPECT_EQ(rejoin_record::key(1, 2, 0), "vessel/coll/rejoin/1/2/0");
  EXPECT_NE(rejoin_record::key(1, 2, 0), rejoin_record::key(1, 3, 0));
}

}  // namespace
}  // namespace vessel::collectives
