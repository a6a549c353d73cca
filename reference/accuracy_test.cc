#include "reference/accuracy.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace mxval::reference {
namespace {

struct Fixture {
  GemmShape s{2, 3, 4, 32};
  YStrides ys = YStrides::For(s, OutputLayout::kHeadMajor);
  std::vector<float> want, got;
  Fixture() {
    for (int i = 0; i < 24; ++i) want.push_back(1.0f + i);
    got = want;
  }
  AccuracyReport Run(const Tolerance& t = {}) { return CompareOutputs(s, got.data(), ys, want.data(), ys, {}, t); }
};

TEST(Accuracy, ExactMatchPasses) {
  Fixture f;
  auto r = f.Run();
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.reason;
  EXPECT_EQ(r.checked, 24);
  EXPECT_EQ(r.max_abs_err, 0);
  EXPECT_NEAR(r.cosine, 1.0, 1e-12);
}

TEST(Accuracy, AssertCloseSemantics) {
  Fixture f;
  // want = 10 at index 9: bound = 1e-5 + 1.6e-2 * 10 = 0.16001.
  f.got[9] = 10.0f + 0.16f;
  EXPECT_EQ(f.Run().verdict, Verdict::kPass);
  f.got[9] = 10.0f + 0.1601f + 1e-3f;
  auto r = f.Run();
  EXPECT_EQ(r.verdict, Verdict::kFailMismatch) << r.reason;
  EXPECT_EQ(r.mismatch_count, 1);
  ASSERT_EQ(r.first_mismatches.size(), 1u);
  EXPECT_EQ(r.first_mismatches[0].b, 0);
  EXPECT_EQ(r.first_mismatches[0].m, 2);
  EXPECT_EQ(r.first_mismatches[0].n, 1);
  EXPECT_NEAR(r.mismatch_fraction, 1.0 / 24, 1e-12);
  Tolerance loose;
  loose.max_mismatch_fraction = 0.05;
  EXPECT_EQ(f.Run(loose).verdict, Verdict::kPass);
}

TEST(Accuracy, AccumulationOrderAllowanceNeedsLargeTerms) {
  Fixture f;
  f.s.K = 512;
  // A near-cancelling element: true value 3e-5 out of terms summing to ~400
  // in magnitude. A different fp32 summation order legitimately moves it by
  // ~1e-5; assert_close alone calls that a mismatch.
  f.want[7] = 3.05e-5f;
  f.got[7] = 4.58e-5f;
  EXPECT_EQ(f.Run().verdict, Verdict::kFailMismatch);
  const AbsDotFn big = [](int64_t, int64_t, int64_t) { return 400.0; };
  auto r = CompareOutputs(f.s, f.got.data(), f.ys, f.want.data(), f.ys, {}, {}, big);
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.reason;
  EXPECT_EQ(r.accumulation_allowed, 1);
  // Small terms: no allowance.
  const AbsDotFn small = [](int64_t, int64_t, int64_t) { return 1e-3; };
  EXPECT_EQ(CompareOutputs(f.s, f.got.data(), f.ys, f.want.data(), f.ys, {}, {}, small).verdict,
            Verdict::kFailMismatch);
  // A real error is not excused by large terms: 0.5 off where the bound is
  // 4 * sqrt(512) * 2^-24 * 400 ~ 2e-3.
  f.got[7] = 0.5f;
  EXPECT_EQ(CompareOutputs(f.s, f.got.data(), f.ys, f.want.data(), f.ys, {}, {}, big).verdict,
            Verdict::kFailMismatch);
  Tolerance off;
  off.accum_sigma = 0;
  f.got[7] = 4.58e-5f;
  EXPECT_EQ(CompareOutputs(f.s, f.got.data(), f.ys, f.want.data(), f.ys, {}, off, big).verdict, Verdict::kFailMismatch);
}

TEST(Accuracy, UnwrittenBeatsEverything) {
  Fixture f;
  f.got[5] = PoisonF32();
  f.got[6] = std::numeric_limits<float>::quiet_NaN();
  auto r = f.Run();
  EXPECT_EQ(r.verdict, Verdict::kFailUnwritten);
  EXPECT_EQ(r.unwritten_count, 1);
  EXPECT_NE(r.reason.find("m=1, n=1"), std::string::npos) << r.reason;
  // A bf16 poison widened to fp32 is recognised too.
  uint32_t bits = uint32_t{kPoisonBf16Bits} << 16;
  float widened;
  std::memcpy(&widened, &bits, 4);
  EXPECT_TRUE(IsPoison(widened));
  EXPECT_FALSE(IsPoison(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_FALSE(IsPoison(-std::numeric_limits<float>::quiet_NaN()));
}

TEST(Accuracy, NonFiniteWhereReferenceFinite) {
  Fixture f;
  f.got[3] = std::numeric_limits<float>::infinity();
  f.got[4] = std::numeric_limits<float>::quiet_NaN();
  auto r = f.Run();
  EXPECT_EQ(r.verdict, Verdict::kFailNonFinite);
  EXPECT_EQ(r.nan_count, 1);
  EXPECT_EQ(r.inf_count, 1);
}

TEST(Accuracy, ReferenceNanMustBeMatched) {
  Fixture f;
  f.want[2] = f.got[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(f.Run().verdict, Verdict::kPass);
  f.got[2] = 3.0f;
  EXPECT_EQ(f.Run().verdict, Verdict::kFailMismatch);
}

TEST(Accuracy, ZeroedOutputIsCatastrophic) {
  Fixture f;
  for (float& v : f.got) v = 0;
  auto r = f.Run();
  EXPECT_EQ(r.verdict, Verdict::kFailCatastrophic) << r.reason;
  EXPECT_NEAR(r.rel_fro_err, 1.0, 1e-12);
}

TEST(Accuracy, ZeroReferenceIsInvalid) {
  Fixture f;
  for (float& v : f.want) v = 0;
  for (float& v : f.got) v = 0;
  EXPECT_EQ(f.Run().verdict, Verdict::kInvalid);
}

TEST(Accuracy, SampledRowsOnly) {
  Fixture f;
  f.got[4] = 1000;  // m = 1
  auto r = CompareOutputs(f.s, f.got.data(), f.ys, f.want.data(), f.ys, {0, 2}, {});
  EXPECT_EQ(r.verdict, Verdict::kPass);
  EXPECT_EQ(r.checked, 16);
}

TEST(Accuracy, DifferentStridesPerOperand) {
  Fixture f;
  // got stored batch-major, want head-major.
  const YStrides bm = YStrides::For(f.s, OutputLayout::kBatchMajor);
  std::vector<float> got_bm(24);
  for (int b = 0; b < 2; ++b)
    for (int m = 0; m < 3; ++m)
      for (int n = 0; n < 4; ++n) got_bm[b * bm.b + m * bm.m + n] = f.want[b * f.ys.b + m * f.ys.m + n];
  auto r = CompareOutputs(f.s, got_bm.data(), bm, f.want.data(), f.ys, {}, {});
  EXPECT_EQ(r.verdict, Verdict::kPass);
  EXPECT_EQ(r.max_abs_err, 0);
}

}  // namespace
}  // namespace mxval::reference
