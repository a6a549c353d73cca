#include "kernels/cpu/convert.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mxfp4/mxfp4.h"

namespace mxval::cpu {
namespace {

TEST(Convert, FloatToBf16MatchesScalarBitForBit) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP();
  std::mt19937 rng(3);
  std::vector<float> src;
  const float specials[] = {0.0f, -0.0f, 1.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(), 1.0f + std::ldexp(1.0f, -8),
                            1.0f + 3 * std::ldexp(1.0f, -8), -(1.0f + std::ldexp(1.0f, -8))};
  for (float f : specials) src.push_back(f);
  for (int i = 0; i < 100003; ++i) {  // random bit patterns, ties included
    uint32_t u = rng();
    if (i % 3 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // exact ties
    float f;
    std::memcpy(&f, &u, 4);
    src.push_back(f);
  }
  std::vector<uint16_t> got(src.size());
  FloatToBf16RowAvx2(src.data(), static_cast<int64_t>(src.size()), got.data());
  for (size_t i = 0; i < src.size(); ++i) {
    const uint16_t want = mxfp4::FloatToBf16Bits(src[i]);
    if (std::isnan(src[i])) {
      ASSERT_TRUE(std::isnan(mxfp4::Bf16BitsToFloat(got[i]))) << i;
      ASSERT_EQ(got[i] & 0x8000, want & 0x8000) << i;
    } else {
      ASSERT_EQ(got[i], want) << "i=" << i << " value " << src[i];
    }
  }
}

TEST(Convert, Bf16ToFloatIsExactWidening) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP();
  std::vector<uint16_t> src(65536 + 5);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i);
  std::vector<float> got(src.size());
  Bf16ToFloatAvx2(src.data(), static_cast<int64_t>(src.size()), got.data());
  for (size_t i = 0; i < src.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &got[i], 4);
    ASSERT_EQ(u, static_cast<uint32_t>(src[i]) << 16) << i;
  }
}

}  // namespace
}  // namespace mxval::cpu
