#include "kernels/mxfp4/mxfp4.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace mxval::mxfp4 {
namespace {

TEST(E2M1, AllSixteenCodesDecode) {
  const float expected[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (uint32_t c = 0; c < 16; ++c) {
    EXPECT_EQ(DecodeE2M1(c), expected[c]) << "code " << c;
    EXPECT_EQ(std::signbit(DecodeE2M1(c)), c >= 8) << "code " << c;
  }
  EXPECT_TRUE(std::signbit(DecodeE2M1(8)));  // -0
}

TEST(E2M1, EveryCodeRoundTrips) {
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(EncodeE2M1(DecodeE2M1(c)), c) << "code " << c;
}

TEST(E2M1, TiesGoToEvenCode) {
  struct Case { float in; float out; } cases[] = {
      {0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},
      {2.5f, 2.0f},  {3.5f, 4.0f},  {5.0f, 4.0f},
      {-0.25f, -0.0f}, {-0.75f, -1.0f}, {-2.5f, -2.0f}, {-5.0f, -4.0f}};
  for (const Case& c : cases) EXPECT_EQ(DecodeE2M1(EncodeE2M1(c.in)), c.out) << c.in;
}

TEST(E2M1, RoundsToNearestOffTies) {
  EXPECT_EQ(DecodeE2M1(EncodeE2M1(0.26f)), 0.5f);
  EXPECT_EQ(DecodeE2M1(EncodeE2M1(0.74f)), 0.5f);
  EXPECT_EQ(DecodeE2M1(EncodeE2M1(2.51f)), 3.0f);
  EXPECT_EQ(DecodeE2M1(EncodeE2M1(4.99f)), 4.0f);
  EXPECT_EQ(DecodeE2M1(EncodeE2M1(5.01f)), 6.0f);
  EXPECT_EQ(EncodeE2M1(-0.1f), 8u);  // keeps the sign of zero
}

TEST(E2M1, SaturatesAtSix) {
  EXPECT_EQ(DecodeE2M1(EncodeE2M1(6.5f)), 6.0f);
  EXPECT_EQ(DecodeE2M1(EncodeE2M1(1e30f)), 6.0f);
  EXPECT_EQ(DecodeE2M1(EncodeE2M1(-std::numeric_limits<float>::infinity())), -6.0f);
}

TEST(E2M1, NearestAgainstBruteForce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-7.0f, 7.0f);
  for (int i = 0; i < 200000; ++i) {
    const float v = u(rng);
    const float got = DecodeE2M1(EncodeE2M1(v));
    // Brute force: closest representable magnitude (ties resolved above).
    float best = 0, bestd = INFINITY;
    for (uint32_t c = 0; c < 8; ++c) {
      const float d = std::fabs(std::fabs(v) - DecodeE2M1(c));
      if (d < bestd) { bestd = d; best = DecodeE2M1(c); }
    }
    ASSERT_EQ(std::fabs(got), best) << v;
  }
}

TEST(E8M0, All256Bytes) {
  for (int s = 0; s < 256; ++s) {
    const float v = DecodeE8M0(static_cast<uint8_t>(s));
    if (s == 255) {
      EXPECT_TRUE(std::isnan(v));
    } else {
      EXPECT_EQ(v, std::ldexp(1.0f, s - 127)) << "byte " << s;
    }
  }
  EXPECT_EQ(DecodeE8M0(0), std::ldexp(1.0f, -127));  // subnormal, exact
  EXPECT_GT(DecodeE8M0(0), 0.0f);
  EXPECT_EQ(DecodeE8M0(127), 1.0f);
  EXPECT_EQ(DecodeE8M0(254), std::ldexp(1.0f, 127));
}

TEST(Packing, LowNibbleIsEvenElement) {
  const uint8_t row[2] = {0x21, 0xF8};  // k0=1, k1=2, k2=8, k3=15
  EXPECT_EQ(UnpackCode(row, 0), 1u);
  EXPECT_EQ(UnpackCode(row, 1), 2u);
  EXPECT_EQ(UnpackCode(row, 2), 8u);
  EXPECT_EQ(UnpackCode(row, 3), 15u);
}

// Oracle scale exponents computed in double with std::ilogb / search.
int OracleExp(double amax, ScaleRule rule) {
  int e;
  if (rule == ScaleRule::kFloor) {
    e = std::ilogb(amax) - 2;
  } else if (rule == ScaleRule::kEven) {
    float f = static_cast<float>(amax);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits = (bits + 0x200000u) & 0xFF800000u;
    float r;
    std::memcpy(&r, &bits, 4);
    if (r == 0) return -127;
    if (std::isinf(r)) return 127;
    e = std::ilogb(static_cast<double>(r)) - 2;
  } else {
    e = -200;
    while (6.0 * std::ldexp(1.0, e) < amax) ++e;
  }
  return std::max(-127, std::min(127, e));
}

class ScaleRuleTest : public ::testing::TestWithParam<ScaleRule> {};

TEST_P(ScaleRuleTest, MatchesOracleOnRandomAndEdgeAmax) {
  const ScaleRule rule = GetParam();
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<uint32_t> bits(1, 0x7F7FFFFFu);  // all positive finite floats
  std::vector<float> amaxes = {1.0f, 1.5f, 1.75f, 1.7499999f, 1.5000001f, 6.0f, 6.0000005f, 4.0f, 8.0f,
                               std::ldexp(1.0f, -126), std::ldexp(1.0f, -130), std::ldexp(1.0f, -149),
                               std::numeric_limits<float>::max(), std::ldexp(1.9f, 127)};
  for (int i = 0; i < 100000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    amaxes.push_back(f);
  }
  for (float a : amaxes) {
    ASSERT_EQ(static_cast<int>(ScaleByteForAmax(a, rule)) - 127, OracleExp(a, rule)) << "amax " << a;
  }
}

TEST_P(ScaleRuleTest, ZeroNanInfBlocks) {
  const ScaleRule rule = GetParam();
  float x[32] = {};
  uint8_t codes[32];
  for (auto& c : codes) c = 0xAA;
  EXPECT_EQ(QuantizeBlock(x, 1, 32, rule, codes), 0);
  for (uint8_t c : codes) EXPECT_EQ(c, 0);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(QuantizeBlock(x, 1, 32, rule, codes), 0xFF);
  x[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(QuantizeBlock(x, 1, 32, rule, codes), 0xFF);
}

TEST_P(ScaleRuleTest, SubnormalBlockClampsToSmallestScale) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = std::ldexp(1.0f, -140) * (i % 5);
  uint8_t codes[32];
  EXPECT_EQ(QuantizeBlock(x, 1, 32, GetParam(), codes), 0);  // 2^-127
  // Elements are x * 2^127 -> at most 4 * 2^-13: all round to zero.
  for (uint8_t c : codes) EXPECT_EQ(c & 7, 0);
}

TEST_P(ScaleRuleTest, ExactValuesRoundTrip) {
  // Values that are exactly code * 2^e with amax = 6 * 2^e survive any rule
  // whose scale is 2^e (floor, even and rceil all pick e for amax = 6 * 2^e).
  std::mt19937 rng(3);
  for (int trial = 0; trial < 1000; ++trial) {
    const int e = static_cast<int>(rng() % 200) - 100;
    float x[32];
    for (int i = 0; i < 32; ++i) x[i] = std::ldexp(DecodeE2M1(rng() % 16), e);
    x[rng() % 32] = std::ldexp(6.0f, e);
    uint8_t codes[32];
    const uint8_t s = QuantizeBlock(x, 1, 32, GetParam(), codes);
    ASSERT_EQ(s, e + 127);
    for (int i = 0; i < 32; ++i) ASSERT_EQ(DecodeE2M1(codes[i]) * DecodeE8M0(s), x[i]);
  }
}

TEST_P(ScaleRuleTest, QuantizationErrorIsBounded) {
  // After scaling, every element error is at most half a step of the E2M1
  // grid at its magnitude (or saturation for floor/even at the top).
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0, 1);
  for (int trial = 0; trial < 2000; ++trial) {
    float x[32];
    for (float& v : x) v = n(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
    uint8_t codes[32];
    const uint8_t s = QuantizeBlock(x, 1, 32, GetParam(), codes);
    const float scale = DecodeE8M0(s);
    for (int i = 0; i < 32; ++i) {
      const float q = DecodeE2M1(codes[i]) * scale;
      const float a = std::fabs(x[i]) / scale;
      const float step = a < 2 ? 0.5f : (a < 4 ? 1.0f : 2.0f);
      if (a <= 6.0f) ASSERT_LE(std::fabs(q - x[i]), 0.5f * step * scale * 1.0001f) << x[i];
      else ASSERT_EQ(std::fabs(q), 6.0f * scale);  // saturated
    }
    if (GetParam() == ScaleRule::kRceil) {
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      ASSERT_LE(amax / scale, 6.0f);  // rceil never saturates
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, ScaleRuleTest,
                         ::testing::Values(ScaleRule::kFloor, ScaleRule::kEven, ScaleRule::kRceil),
                         [](const auto& info) {
                           return std::string(info.param == ScaleRule::kFloor  ? "floor"
                                              : info.param == ScaleRule::kEven ? "even"
                                                                               : "rceil");
                         });

TEST(ScaleRule, RulesDifferWhereTheyShould) {
  // amax = 7: floor -> 2^0 (7 saturates to 6), even -> 8 -> 2^1, rceil -> 2^1.
  EXPECT_EQ(ScaleByteForAmax(7.0f, ScaleRule::kFloor), 127);
  EXPECT_EQ(ScaleByteForAmax(7.0f, ScaleRule::kEven), 128);
  EXPECT_EQ(ScaleByteForAmax(7.0f, ScaleRule::kRceil), 128);
  // amax = 6.5: even keeps 2^0 (mantissa 1.625 rounds to 1.5), rceil goes up.
  EXPECT_EQ(ScaleByteForAmax(6.5f, ScaleRule::kEven), 127);
  EXPECT_EQ(ScaleByteForAmax(6.5f, ScaleRule::kRceil), 128);
}

TEST(Bf16, RoundToNearestEven) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3F80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even).
  EXPECT_EQ(RoundToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(RoundToBf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isinf(RoundToBf16(std::numeric_limits<float>::max())));  // rounds up to inf
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000);
}

}  // namespace
}  // namespace mxval::mxfp4
