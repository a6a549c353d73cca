#include "common/token_bucket.h"

#include "gtest/gtest.h"

namespace mxval {
namespace {

TEST(TokenBucket, BurstThenRateWithTheWaitToTheNextToken) {
  TokenBucket b(/*rate_per_second=*/2, /*burst=*/3);
  absl::Time t = absl::FromUnixSeconds(1000);
  absl::Duration wait;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b.TryTake(t, &wait)) << i;
  EXPECT_FALSE(b.TryTake(t, &wait));
  EXPECT_EQ(wait, absl::Milliseconds(500));
  t += absl::Milliseconds(499);
  EXPECT_FALSE(b.TryTake(t, &wait));
  EXPECT_LT(wait, absl::Milliseconds(2));
  t += absl::Milliseconds(1);
  EXPECT_TRUE(b.TryTake(t, &wait));
  // Idle time refills up to the burst, never past it.
  t += absl::Hours(1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b.TryTake(t, &wait));
  EXPECT_FALSE(b.TryTake(t, &wait));
  // A clock that steps back does not mint tokens.
  EXPECT_FALSE(b.TryTake(t - absl::Seconds(10), &wait));
}

TEST(TokenBucket, BurstBelowOneStillAdmitsOne) {
  TokenBucket b(0.1, 0.2);
  absl::Duration wait;
  EXPECT_TRUE(b.TryTake(absl::UnixEpoch(), &wait));
  EXPECT_FALSE(b.TryTake(absl::UnixEpoch(), &wait));
  EXPECT_EQ(wait, absl::Seconds(10));
}

}  // namespace
}  // namespace mxval
