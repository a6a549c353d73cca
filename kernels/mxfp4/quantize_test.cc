#include "kernels/mxfp4/quantize.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mxval::mxfp4 {
namespace {

TEST(QuantizeRows, StridedRoundTripAndGuardsUntouched) {
  const int64_t rows = 5, K = 96, xs = 100, ps = K / 2 + 3, ss = K / 32 + 1;
  std::vector<float> x(rows * xs, 1e9f);
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0, 2);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) x[r * xs + k] = n(rng);
  std::vector<uint8_t> packed(rows * ps, 0xEE), scales(rows * ss, 0xEE);
  ASSERT_TRUE(QuantizeRows(x.data(), rows, K, xs, ScaleRule::kEven, packed.data(), ps, scales.data(), ss).ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = K / 2; i < ps; ++i) EXPECT_EQ(packed[r * ps + i], 0xEE);
    EXPECT_EQ(scales[r * ss + K / 32], 0xEE);
  }
  std::vector<float> y(rows * K);
  ASSERT_TRUE(DequantizeRows(packed.data(), ps, scales.data(), ss, rows, K, y.data(), K).ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < K / 32; ++g) {
      uint8_t codes[32];
      const uint8_t s = QuantizeBlock(&x[r * xs + g * 32], 1, 32, ScaleRule::kEven, codes);
      ASSERT_EQ(scales[r * ss + g], s);
      for (int i = 0; i < 32; ++i) ASSERT_EQ(y[r * K + g * 32 + i], DecodeE2M1(codes[i]) * DecodeE8M0(s));
    }
  }
}

TEST(QuantizeRows, RejectsBadShapes) {
  std::vector<float> x(64);
  std::vector<uint8_t> p(64), s(4);
  EXPECT_EQ(QuantizeRows(x.data(), 1, 48, 48, ScaleRule::kFloor, p.data(), 24, s.data(), 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRows(x.data(), 2, 32, 16, ScaleRule::kFloor, p.data(), 16, s.data(), 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseScaleRule("nearest").ok());
  EXPECT_EQ(*ParseScaleRule("rceil"), ScaleRule::kRceil);
}

}  // namespace
}  // namespace mxval::mxfp4
