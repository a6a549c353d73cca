// The gfx950 native-MXFP4 kernel's lane logic (kernels/gpu/mfma_scale_fp4.h)
// on the CPU: every wave of every workgroup, all 64 lanes building their
// operands exactly as a16wfp4_mfma_scale does, the instruction replaced by
// its host model, outputs stored by the kernel's store function, and the
// result checked against the FP32 reference in mxfp4-even mode (guards:
// scale bytes past K/32 are 0xFF, y is poisoned). What this cannot show is
// that a gfx950 computes what the model says: no such GPU is reachable.
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gpu/mfma_scale_fp4.h"
#include "validation/validation_case.h"

namespace mxval::gpu {
namespace {

GemmParams ParamsFor(const CaseData& d, uint16_t* y) {
  const GemmShape& s = d.spec.shape;
  GemmParams p{};
  p.B = s.B, p.M = s.M, p.N = s.N, p.K = s.K;
  p.act_mxfp4 = 1;
  p.x = d.x_bf16.data(), p.x_sb = d.xs.b, p.x_sm = d.xs.m, p.x_sk = d.xs.k;
  p.wp = d.packed.data(), p.wp_sb = d.w.packed_stride_b, p.wp_sn = d.w.packed_stride_n;
  p.ws = d.scales.data(), p.ws_sb = d.w.scale_stride_b, p.ws_sn = d.w.scale_stride_n;
  p.y = y, p.y_sb = d.ys.b, p.y_sm = d.ys.m;
  p.ksplit = 1;
  return p;
}

// a16wfp4_mfma_scale's grid and waves, run lane by lane. b_group_xor != 0
// misplaces the weights' K groups (lane 16 g + j reads group g ^ b_group_xor),
// the kind of layout slip the check must catch.
absl::Status EmulateMfmaScale(const CaseData& d, uint16_t* y, int wm, int wn, int b_group_xor = 0) {
  const GemmParams p = ParamsFor(d, y);
  const int gx = static_cast<int>((p.N + 16 * wn - 1) / (16 * wn)), gy = static_cast<int>((p.M + 16 * wm - 1) / (16 * wm));
  Fp4Lane a[64], w[64];
  float acc[64][4];
  for (int64_t b = 0; b < p.B; ++b)
    for (int by = 0; by < gy; ++by)
      for (int bx = 0; bx < gx; ++bx)
        for (int wave = 0; wave < wm * wn; ++wave) {
          int64_t m0, n0;
          MfmaScaleWaveOrigin(wm, wn, bx, by, wave, &m0, &n0);
          if (m0 >= p.M || n0 >= p.N) continue;
          std::memset(acc, 0, sizeof(acc));
          for (int64_t k0 = 0; k0 < p.K; k0 += kMfmaScaleK) {
            for (int lane = 0; lane < 64; ++lane) {
              a[lane] = XLaneEven(p, b, m0 + MfmaScaleRow(lane), k0 + MfmaScaleKOffset(lane));
              const int wl = (lane & 15) | (((lane >> 4) ^ b_group_xor) << 4);
              w[lane] = WLane(p, b, n0 + MfmaScaleRow(lane), k0 + MfmaScaleKOffset(wl));
            }
            MfmaScaleFp4Model(a, w, acc);
          }
          for (int lane = 0; lane < 64; ++lane) MfmaScaleStoreLane(p, b, m0, n0, lane, acc[lane]);
        }
  return absl::OkStatus();
}

struct Case {
  GemmShape shape;
  OutputLayout layout;
  bool strided;
  int wm, wn;
};

class MfmaScaleEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(MfmaScaleEmulation, MatchesReferenceInMxfp4EvenMode) {
  const Case& c = GetParam();
  CaseSpec spec;
  spec.shape = c.shape;
  spec.activations = ActivationMode::kMxfp4Even;
  spec.layout = c.layout;
  spec.strided_x = c.strided;
  spec.seed = c.shape.M * 131 + c.shape.K + c.wn;
  auto d = CaseData::Build(spec);
  ASSERT_TRUE(d.ok()) << d.status();
  auto r = CheckKernel(*d, [&](const CaseData& dd, uint16_t* y) { return EmulateMfmaScale(dd, y, c.wm, c.wn); }, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->accuracy.verdict, reference::Verdict::kPass) << r->accuracy.reason;
}

// K = 192 and 96 leave a ragged last 128-wide step (its upper groups are
// masked, and the scale bytes behind them hold the 0xFF guard); M and N not
// multiples of the tile; strided x (as q_nope inside q); both layouts; every
// compiled wave grid.
INSTANTIATE_TEST_SUITE_P(
    Shapes, MfmaScaleEmulation,
    ::testing::Values(Case{{2, 1, 64, 192}, OutputLayout::kHeadMajor, true, 1, 4},
                      Case{{2, 33, 70, 192}, OutputLayout::kBatchMajor, true, 2, 2},
                      Case{{1, 40, 128, 512}, OutputLayout::kBatchMajor, false, 4, 4},
                      Case{{3, 7, 16, 128}, OutputLayout::kHeadMajor, false, 1, 1},
                      Case{{2, 65, 100, 96}, OutputLayout::kHeadMajor, true, 2, 2},
                      Case{{1, 130, 256, 512}, OutputLayout::kHeadMajor, false, 4, 4}));

TEST(MfmaScaleEmulation, MisplacedWeightGroupsFailTheCheck) {
  CaseSpec spec;
  spec.shape = {2, 33, 64, 512};
  spec.activations = ActivationMode::kMxfp4Even;
  auto d = CaseData::Build(spec);
  ASSERT_TRUE(d.ok());
  auto r = CheckKernel(*d, [&](const CaseData& dd, uint16_t* y) { return EmulateMfmaScale(dd, y, 2, 2, 1); }, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->accuracy.verdict, reference::Verdict::kPass);
}

TEST(MfmaScaleEmulation, MaskedLanesReadNothing) {
  // Null pointers: any read past M, N or K would crash.
  GemmParams p{};
  p.B = 1, p.M = 5, p.N = 9, p.K = 192;
  const Fp4Lane x = XLaneEven(p, 0, 5, 0), xk = XLaneEven(p, 0, 0, 192), w = WLane(p, 0, 9, 0), wk = WLane(p, 0, 0, 224);
  for (const Fp4Lane& o : {x, xk, w, wk}) {
    EXPECT_EQ(o.scale, kE8M0One);
    for (uint32_t c : o.codes) EXPECT_EQ(c, 0u);
  }
}

TEST(MfmaScaleEmulation, LaneOperandsCarryTheRowsGroupAndScale) {
  // x row 1, group 1 (k = 32..63) holds 0.5 * (k - 32) - 4: the even rule
  // gives amax 11.5 -> scale 2^1 and codes value / 2; one weight row with
  // byte k / 2 = k and scale byte 130 in group 1.
  std::vector<uint16_t> x(2 * 64, 0);
  for (int k = 32; k < 64; ++k) x[64 + k] = mxfp4::FloatToBf16Bits(0.5f * (k - 32) - 4.0f);
  std::vector<uint8_t> wp(32), ws = {127, 130};
  for (int i = 0; i < 32; ++i) wp[i] = static_cast<uint8_t>(i);
  GemmParams p{};
  p.B = 1, p.M = 2, p.N = 1, p.K = 64;
  p.x = x.data(), p.x_sm = 64, p.x_sk = 1;
  p.wp = wp.data(), p.wp_sn = 32, p.ws = ws.data(), p.ws_sn = 2;
  const Fp4Lane a = XLaneEven(p, 0, 1, 32);
  EXPECT_EQ(a.scale, 128u);
  for (int e = 0; e < 32; ++e) {
    const float v = 0.25f * e - 2.0f;  // (0.5 e - 4) / 2
    EXPECT_EQ(Fp4LaneValue(a, e), mxfp4::DecodeE2M1(mxfp4::EncodeE2M1(v)) * 2.0) << e;
  }
  const Fp4Lane w = WLane(p, 0, 0, 32);
  EXPECT_EQ(w.scale, 130u);
  EXPECT_EQ(w.codes[0], 0x13121110u);  // bytes 16..19 of the row
  EXPECT_EQ(w.codes[3], 0x1F1E1D1Cu);
}

TEST(MfmaScaleEmulation, ModelTreatsScale0xFFAsNaN) {
  Fp4Lane a[64], b[64];
  for (int l = 0; l < 64; ++l) {
    a[l] = {{0x22222222u, 0x22222222u, 0x22222222u, 0x22222222u}, kE8M0One};  // every code 1.0
    b[l] = a[l];
  }
  float d[64][4] = {};
  MfmaScaleFp4Model(a, b, d);
  EXPECT_EQ(d[0][0], 128.0f);  // 4 groups x 32 products of 1.0
  b[16 * 2 + 5].scale = 0xFF;  // column 5, group 2
  std::memset(d, 0, sizeof(d));
  MfmaScaleFp4Model(a, b, d);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      const float v = d[16 * (i / 4) + j][i % 4];
      if (j == 5) {
        EXPECT_TRUE(std::isnan(v)) << i;
      } else {
        EXPECT_EQ(v, 128.0f) << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace mxval::gpu
