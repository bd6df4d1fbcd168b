#include "collectives/reduce.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/errc.hpp"

namespace vessel::collectives {
namespace {

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <class T>
std::vector<T> values_of(const std::vector<std::byte>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(CollectivesReduce, Float32SumAndInt32Min) {
  auto a = bytes_of<float>({1.5f, -2.0f, 3.0f});
  const auto b = bytes_of<float>({0.5f, 2.0f, -7.0f});
  ASSERT_TRUE(reduce_into(a, b, dtype::float32, reduce_op::sum));
  EXPECT_EQ(values_of<float>(a), (std::vector<float>{2.0f, 0.0f, -4.0f}));

  auto c = bytes_of<std::int32_t>({5, -9, 0});
  const auto d = bytes_of<std::int32_t>({-5, 9, 0});
  ASSERT_TRUE(reduce_into(c, d, dtype::int32, reduce_op::min));
  EXPECT_EQ(values_of<std::int32_t>(c), (std::vector<std::int32_t>{-5, -9, 0}));
}

TEST(CollectivesReduce, BitwiseOnFloatIsUnsupported) {
  auto a = bytes_of<float>({1.0f});
  const auto b = bytes_of<float>({1.0f});
  for (reduce_op op : {reduce_op::band, reduce_op::bor, reduce_op::bxor}) {
    const auto r = reduce_into(a, b, dtype::float32, op);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), errc::unsupported_op);
  }
}

TEST(CollectivesReduce, SizeMismatch) {
  std::vector<std::byte> a(8), b(12), odd(6);
  auto r = reduce_into(a, b, dtype::float32, reduce_op::sum);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::size_mismatch);
  std::vector<std::byte> odd2(6);
  r = reduce_into(odd, odd2, dtype::float32, reduce_op::sum);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::size_mismatch);
}

TEST(CollectivesReduce, AverageTruncatesIntegers) {
  auto a = bytes_of<std::int8_t>({7, -7, 100});
  ASSERT_TRUE(finish_average(a, dtype::int8, 2));
  EXPECT_EQ(values_of<std::int8_t>(a), (std::vector<std::int8_t>{3, -3, 50}));
  auto b = bytes_of<std::int8_t>({127, -128});
  ASSERT_TRUE(finish_average(b, dtype::int8, 200));
  EXPECT_EQ(values_of<std::int8_t>(b), (std::vector<std::int8_t>{0, 0}));
  const auto r = finish_average(a, dtype::int8, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::invalid_argument);
}

}  // namespace
}  // namespace vessel::collectives
