#include "common/stats.h"

#include "gtest/gtest.h"

namespace mxval {
namespace {

TEST(Percentile, EmptyIsZero) { EXPECT_EQ(Percentile({}, 0.5), 0); }

TEST(Percentile, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(Percentile({3, 1, 2}, 0.5), 2);
  EXPECT_EQ(Percentile({4, 1, 3, 2}, 0.5), 3);  // the upper one of an even count
}

TEST(Percentile, NearestRankAtTheTails) {
  std::vector<double> v;
  for (int i = 10; i >= 1; --i) v.push_back(i);  // 10..1, unsorted on purpose
  EXPECT_EQ(Percentile(v, 0.1), 2);              // round(0.9) = index 1
  EXPECT_EQ(Percentile(v, 0.9), 9);              // round(8.1) = index 8
  EXPECT_EQ(Percentile(v, 0.0), 1);
  EXPECT_EQ(Percentile(v, 1.0), 10);
  EXPECT_EQ(Percentile(v, 7.0), 10);  // clamped
  EXPECT_EQ(Percentile(v, -1.0), 1);
}

}  // namespace
}  // namespace mxval
