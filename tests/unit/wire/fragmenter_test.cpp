#include "wire/fragmenter.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

namespace vessel::wire {
namespace {

static_assert(std::forward_iterator<fragmenter::iterator>);

std::vector<fragment> all_of(const fragmenter& f) { return {f.begin(), f.end()}; }

TEST(fragmenter, splits_a_message_into_full_fragments_and_a_shorter_last_one) {
  const fragmenter f = fragmenter::make(10, 4).value();
  EXPECT_EQ(f.count(), 3u);
  const std::vector<fragment> expected{{0, 3, 0, 4}, {1, 3, 4, 4}, {2, 3, 8, 2}};
  EXPECT_EQ(all_of(f), expected);
}

TEST(fragmenter, exact_multiple_has_no_short_fragment) {
  const fragmenter f = fragmenter::make(12, 4).value();
  const std::vector<fragment> expected{{0, 3, 0, 4}, {1, 3, 4, 4}, {2, 3, 8, 4}};
  EXPECT_EQ(all_of(f), expected);
}

TEST(fragmenter, message_smaller_than_a_fragment_is_one_fragment) {
  const fragmenter f = fragmenter::make(5, 4096).value();
  const std::vector<fragment> expected{{0, 1, 0, 5}};
  EXPECT_EQ(all_of(f), expected);
}

TEST(fragmenter, empty_message_is_one_empty_fragment) {
  const fragmenter f = fragmenter::make(0, 4096).value();
  const std::vector<fragment> expected{{0, 1, 0, 0}};
  EXPECT_EQ(f.count(), 1u);
  EXPECT_EQ(all_of(f), expected);
}

TEST(fragmenter, rejects_a_zero_fragment_size) {
  const auto f = fragmenter::make(10, 0);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error(), errc::bad_field);
}

TEST(fragmenter, rejects_a_count_that_does_not_fit_the_header_field) {
  constexpr std::uint64_t max_count = std::numeric_limits<std::uint32_t>::max();
  const auto at_limit = fragmenter::make(max_count, 1);
  ASSERT_TRUE(at_limit);
  EXPECT_EQ(at_limit.value().count(), max_count);
  EXPECT_EQ(at_limit.value()[static_cast<std::uint32_t>(max_count - 1)],
            (fragment{static_cast<std::uint32_t>(max_count - 1), static_cast<std::uint32_t>(max_count),
                      max_count - 1, 1}));
  const auto over = fragmenter::make(max_count + 1, 1);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error(), errc::too_many_fragments);
}

TEST(fragmenter, iterators_stay_valid_after_the_layout_is_gone) {
  fragmenter::iterator it;
  fragmenter::iterator end;
  {
    const fragmenter f = fragmenter::make(1000, 300).value();
    it = f.begin();
    end = f.end();
  }
  std::uint64_t bytes = 0;
  for (; it != end; ++it) bytes += (*it).length;
  EXPECT_EQ(bytes, 1000u);
}

// Random layouts: fragments tile [0, total) exactly, in order, all but the last of the same size.
TEST(fragmenter, fragments_tile_the_message_for_random_sizes) {
  std::mt19937_64 rng{1234};
  for (int round = 0; round < 2000; ++round) {
    const std::uint64_t total = rng() % 100'000;
    const std::uint64_t size = 1 + rng() % 5'000;
    const fragmenter f = fragmenter::make(total, size).value();
    ASSERT_EQ(f.count(), total == 0 ? 1 : (total + size - 1) / size);
    std::uint64_t next = 0;
    std::uint32_t index = 0;
    for (const fragment frag : f) {
      ASSERT_EQ(frag.index, index);
      ASSERT_EQ(frag.count, f.count());
      ASSERT_EQ(frag.offset, next);
      if (index + 1 < f.count()) {
        ASSERT_EQ(frag.length, size);
      } else {
        ASSERT_LE(frag.length, size);
        ASSERT_TRUE(frag.length > 0 || total == 0);
      }
      ASSERT_EQ(f[index], frag);
      next += frag.length;
      ++index;
    }
    ASSERT_EQ(index, f.count());
    ASSERT_EQ(next, total);
  }
}

}  // namespace
}  // namespace vessel::wire
