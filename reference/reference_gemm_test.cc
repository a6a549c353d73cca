#include "reference/reference_gemm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mxfp4/mxfp4.h"
#include "kernels/mxfp4/quantize.h"

namespace mxval::reference {
namespace {

struct Problem {
  GemmShape s;
  XStrides xs;
  std::vector<float> x;
  std::vector<uint8_t> packed, scales;
  WeightView w;
};

Problem Make(GemmShape s, bool strided, uint64_t seed) {
  Problem p;
  p.s = s;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0, 1);
  const int64_t pitch = strided ? s.K + 64 : s.K;
  p.xs = strided ? XStrides{pitch, s.B * pitch, 1} : XStrides{s.M * s.K, s.K, 1};
  p.x.assign(s.B * s.M * pitch, std::numeric_limits<float>::quiet_NaN());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t k = 0; k < s.K; ++k) p.x[b * p.xs.b + m * p.xs.m + k] = n(rng) * (1 + (k % 7));
  std::vector<float> wf(s.B * s.N * s.K);
  for (float& v : wf) v = n(rng);
  p.packed.resize(s.B * s.N * s.K / 2);
  p.scales.resize(s.B * s.N * s.K / 32);
  EXPECT_TRUE(mxfp4::QuantizeRows(wf.data(), s.B * s.N, s.K, s.K, mxfp4::ScaleRule::kFloor, p.packed.data(), s.K / 2,
                                  p.scales.data(), s.K / 32)
                  .ok());
  p.w = {p.packed.data(), s.N * s.K / 2, s.K / 2, p.scales.data(), s.N * s.K / 32, s.K / 32};
  return p;
}

// Naive FP64 triple loop, using the format library's quantizer for the
// activations (the reference has its own; this cross-checks them).
void Naive(const Problem& p, ActivationMode mode, std::vector<double>& y, std::vector<double>& absdot) {
  const GemmShape& s = p.s;
  y.assign(s.B * s.M * s.N, 0);
  absdot.assign(s.B * s.M * s.N, 0);
  std::vector<float> wd(s.N * s.K), xr(s.K);
  for (int64_t b = 0; b < s.B; ++b) {
    ASSERT_TRUE(mxfp4::DequantizeRows(p.packed.data() + b * p.w.packed_stride_b, s.K / 2,
                                      p.scales.data() + b * p.w.scale_stride_b, s.K / 32, s.N, s.K, wd.data(), s.K)
                    .ok());
    for (int64_t m = 0; m < s.M; ++m) {
      for (int64_t k = 0; k < s.K; ++k) xr[k] = mxfp4::RoundToBf16(p.x[b * p.xs.b + m * p.xs.m + k]);
      if (mode == ActivationMode::kMxfp4Even) {
        for (int64_t g = 0; g < s.K; g += 32) {
          uint8_t codes[32];
          const float sc = mxfp4::DecodeE8M0(mxfp4::QuantizeBlock(&xr[g], 1, 32, mxfp4::ScaleRule::kEven, codes));
          for (int i = 0; i < 32; ++i) xr[g + i] = mxfp4::DecodeE2M1(codes[i]) * sc;
        }
      }
      for (int64_t n = 0; n < s.N; ++n) {
        double acc = 0, aacc = 0;
        for (int64_t k = 0; k < s.K; ++k) {
          acc += static_cast<double>(xr[k]) * wd[n * s.K + k];
          aacc += std::fabs(static_cast<double>(xr[k]) * wd[n * s.K + k]);
        }
        y[(b * s.M + m) * s.N + n] = acc;
        absdot[(b * s.M + m) * s.N + n] = aacc;
      }
    }
  }
}

struct Case {
  GemmShape s;
  bool strided;
  ActivationMode mode;
  OutputLayout layout;
  bool scalar;
  bool fp64;
};

class ReferenceVsNaive : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceVsNaive, MatchesFp64TripleLoop) {
  const Case& c = GetParam();
  Problem p = Make(c.s, c.strided, 42 + c.s.M * 7 + c.s.K);
  std::vector<double> want, absdot;
  Naive(p, c.mode, want, absdot);
  const YStrides ys = YStrides::For(c.s, c.layout);
  std::vector<float> y(c.s.B * c.s.M * c.s.N, std::numeric_limits<float>::quiet_NaN());
  ReferenceOptions opt;
  opt.activations = c.mode;
  opt.force_scalar = c.scalar;
  opt.fp64_accumulate = c.fp64;
  opt.threads = 2;
  ASSERT_TRUE(ReferenceGemm(c.s, p.x.data(), p.xs, p.w, y.data(), ys, opt).ok());
  double norm = 0;
  for (int64_t b = 0; b < c.s.B; ++b)
    for (int64_t m = 0; m < c.s.M; ++m)
      for (int64_t n = 0; n < c.s.N; ++n) {
        const int64_t i = (b * c.s.M + m) * c.s.N + n;
        const float got = y[b * ys.b + m * ys.m + n];
        // fp32 accumulation bound: K * eps * sum|terms| (fp64: rounding of the result).
        const double bound = (c.fp64 ? 1e-7 : c.s.K * 6e-8) * absdot[i] + 1e-30;
        ASSERT_LE(std::fabs(got - want[i]), bound) << "b=" << b << " m=" << m << " n=" << n;
        norm += want[i] * want[i];
      }
  EXPECT_GT(norm, 0);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const GemmShape shapes[] = {{1, 1, 16, 32}, {2, 1, 40, 192}, {3, 7, 33, 192}, {2, 13, 64, 128},
                              {1, 6, 17, 512}, {4, 29, 24, 96}, {2, 64, 48, 256}};
  for (const GemmShape& s : shapes)
    for (bool strided : {false, true})
      for (ActivationMode m : {ActivationMode::kBf16, ActivationMode::kMxfp4Even})
        for (OutputLayout l : {OutputLayout::kHeadMajor, OutputLayout::kBatchMajor})
          cases.push_back({s, strided, m, l, false, false});
  cases.push_back({{2, 13, 40, 192}, true, ActivationMode::kBf16, OutputLayout::kBatchMajor, true, false});
  cases.push_back({{2, 13, 40, 192}, false, ActivationMode::kMxfp4Even, OutputLayout::kHeadMajor, true, false});
  cases.push_back({{2, 13, 40, 192}, true, ActivationMode::kMxfp4Even, OutputLayout::kHeadMajor, false, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ReferenceVsNaive, ::testing::ValuesIn(Cases()));

TEST(Reference, AbsDotMatchesNaive) {
  GemmShape s{2, 5, 24, 96};
  Problem p = Make(s, true, 4);
  std::vector<double> want, absdot;
  for (ActivationMode mode : {ActivationMode::kBf16, ActivationMode::kMxfp4Even}) {
    Naive(p, mode, want, absdot);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t n = 0; n < s.N; ++n)
          ASSERT_NEAR(AbsDot(s, p.x.data(), p.xs, p.w, mode, b, m, n), absdot[(b * s.M + m) * s.N + n],
                      1e-9 * absdot[(b * s.M + m) * s.N + n]);
  }
}

TEST(Reference, SampledRowsComputeOnlyThoseRows) {
  GemmShape s{3, 300, 40, 64};
  Problem p = Make(s, false, 9);
  const YStrides ys = YStrides::For(s, OutputLayout::kHeadMajor);
  std::vector<float> full(s.B * s.M * s.N), part(s.B * s.M * s.N, -12345.0f);
  ASSERT_TRUE(ReferenceGemm(s, p.x.data(), p.xs, p.w, full.data(), ys, {}).ok());
  ReferenceOptions opt;
  opt.rows = SampleRows(s.M, 20, 1);
  ASSERT_TRUE(ReferenceGemm(s, p.x.data(), p.xs, p.w, part.data(), ys, opt).ok());
  std::vector<bool> sampled(s.M, false);
  for (int64_t r : opt.rows) sampled[r] = true;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t n = 0; n < s.N; ++n) {
        const float v = part[b * ys.b + m * ys.m + n];
        if (sampled[m]) ASSERT_EQ(v, full[b * ys.b + m * ys.m + n]);
        else ASSERT_EQ(v, -12345.0f);
      }
}

TEST(Reference, SampleRowsCoversEdges) {
  const auto rows = SampleRows(1000, 40, 3);
  EXPECT_EQ(rows.size(), 40u);
  auto has = [&](int64_t r) { return std::find(rows.begin(), rows.end(), r) != rows.end(); };
  EXPECT_TRUE(has(0));
  EXPECT_TRUE(has(999));
  EXPECT_TRUE(has(992));  // last 16-row tile starts at 992
  EXPECT_TRUE(has(768));  // last 256-row tile
  EXPECT_TRUE(has(767));
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_EQ(SampleRows(5, 100, 1).size(), 5u);
}

TEST(Reference, RejectsBadInput) {
  GemmShape s{1, 4, 16, 48};
  std::vector<float> x(1000), y(1000);
  std::vector<uint8_t> w(1000);
  WeightView wv{w.data(), 0, 24, w.data(), 0, 1};
  EXPECT_EQ(ReferenceGemm(s, x.data(), {}, wv, y.data(), {}, {}).code(), absl::StatusCode::kInvalidArgument);
  s.K = 64;
  ReferenceOptions opt;
  opt.rows = {4};
  EXPECT_EQ(ReferenceGemm(s, x.data(), {}, wv, y.data(), {}, opt).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReferenceGemm(s, nullptr, {}, wv, y.data(), {}, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FakeQuantizeGroupEven, AgreesWithFormatLibraryQuantizer) {
  // Two independent implementations of the "even" rule must agree exactly,
  // on random data across magnitudes, ties, saturation and subnormals.
  std::mt19937_64 rng(17);
  std::normal_distribution<float> n(0, 1);
  std::uniform_int_distribution<int> e(-140, 120);
  for (int trial = 0; trial < 50000; ++trial) {
    float v[32], lib[32];
    const float scale = std::ldexp(1.0f, e(rng));
    for (int i = 0; i < 32; ++i) {
      v[i] = n(rng) * scale;
      if (trial % 5 == 0) v[i] = mxfp4::DecodeE2M1(rng() % 16) * scale * 0.75f;  // many exact ties
    }
    uint8_t codes[32];
    const float s = mxfp4::DecodeE8M0(mxfp4::QuantizeBlock(v, 1, 32, mxfp4::ScaleRule::kEven, codes));
    for (int i = 0; i < 32; ++i) lib[i] = mxfp4::DecodeE2M1(codes[i]) * s;
    FakeQuantizeGroupEven(v);
    for (int i = 0; i < 32; ++i) ASSERT_EQ(v[i], lib[i]) << "trial " << trial << " i " << i;
  }
  float nan_group[32] = {};
  nan_group[5] = std::numeric_limits<float>::infinity();
  FakeQuantizeGroupEven(nan_group);
  for (float f : nan_group) EXPECT_TRUE(std::isnan(f));
}

}  // namespace
}  // namespace mxval::reference
