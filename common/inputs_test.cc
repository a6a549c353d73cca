#include "common/inputs.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mxfp4/mxfp4.h"

namespace mxval {
namespace {

TEST(Inputs, SeededAndDeterministic) {
  for (const char* g : {"normal", "normal:0.25", "mxfp4-exact", "heavy-tail", "uniform-codes"}) {
    auto spec = ParseGenerator(g);
    ASSERT_TRUE(spec.ok()) << g;
    std::vector<float> a(4 * 64), b(4 * 64), c(4 * 64);
    FillTensor(*spec, 5, a.data(), 4, 64, 64);
    FillTensor(*spec, 5, b.data(), 4, 64, 64);
    FillTensor(*spec, 6, c.data(), 4, 64, 64);
    EXPECT_EQ(a, b) << g;
    EXPECT_NE(a, c) << g;
    int nonzero = 0;
    for (float v : a) nonzero += v != 0 && std::isfinite(v);
    EXPECT_GT(nonzero, 64 * 4 / 2) << g;
  }
}

TEST(Inputs, Mxfp4ExactIsExactlyRepresentable) {
  auto spec = ParseGenerator("mxfp4-exact");
  std::vector<float> x(8 * 128);
  FillTensor(*spec, 9, x.data(), 8, 128, 128);
  for (size_t g = 0; g < x.size(); g += 32) {
    uint8_t codes[32];
    for (auto rule : {mxfp4::ScaleRule::kFloor, mxfp4::ScaleRule::kEven, mxfp4::ScaleRule::kRceil}) {
      const float s = mxfp4::DecodeE8M0(mxfp4::QuantizeBlock(&x[g], 1, 32, rule, codes));
      for (int i = 0; i < 32; ++i) ASSERT_EQ(mxfp4::DecodeE2M1(codes[i]) * s, x[g + i]);
    }
  }
}

TEST(Inputs, NormalIsNotExact) {
  // The point of non-exact generators: re-quantization must change values.
  std::vector<float> x(32 * 16);
  FillTensor(*ParseGenerator("normal"), 1, x.data(), 16, 32, 32);
  int changed = 0;
  for (size_t g = 0; g < x.size(); g += 32) {
    uint8_t codes[32];
    const float s = mxfp4::DecodeE8M0(mxfp4::QuantizeBlock(&x[g], 1, 32, mxfp4::ScaleRule::kEven, codes));
    for (int i = 0; i < 32; ++i) changed += mxfp4::DecodeE2M1(codes[i]) * s != x[g + i];
  }
  EXPECT_GT(changed, 400);
}

TEST(Inputs, HeavyTailHasOutliers) {
  std::vector<float> x(64 * 512);
  FillTensor(*ParseGenerator("heavy-tail:0.01"), 2, x.data(), 64, 512, 512);
  int big = 0;
  for (float v : x) big += std::fabs(v) > 30;
  EXPECT_GT(big, 50);
}

TEST(Inputs, RejectsUnknownGenerators) {
  for (const char* g : {"gauss", "normal:-1", "normal:x", "heavy-tail:2", "mxfp4-exact:3", "extreme-scales:1", ""}) {
    EXPECT_EQ(ParseGenerator(g).status().code(), absl::StatusCode::kInvalidArgument) << g;
  }
  // extreme-scales is a weight generator: activations refuse it, clearly.
  ASSERT_TRUE(ParseGenerator("extreme-scales").ok());
  EXPECT_EQ(ParseGenerator("extreme-scales")->ToString(), "extreme-scales");
  const auto x = ParseActivationGenerator("extreme-scales");
  EXPECT_EQ(x.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(x.status().message().find("weights only"), std::string::npos) << x.status();
  EXPECT_TRUE(ParseActivationGenerator("heavy-tail").ok());
  EXPECT_NE(OperandSeed(1, 0), OperandSeed(1, 1));
  EXPECT_NE(OperandSeed(1, 0), OperandSeed(2, 0));
}

}  // namespace
}  // namespace mxval
