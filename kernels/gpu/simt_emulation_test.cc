// Runs the GPU kernels' shared tile phases and the SIMT atom on the CPU under
// a tiny CTA emulator (every thread of a phase, then the "barrier"), and
// checks the result against the FP32 reference: the masking, dequantization,
// in-tile re-quantization, split-K and store logic of the GPU path, tested
// without a GPU.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gpu/a16wfp4_tile.h"
#include "kernels/gpu/dequant_selftest_check.h"
#include "validation/validation_case.h"

namespace mxval::gpu {
namespace {

absl::Status EmulateSimt(const CaseData& d, uint16_t* y, int ksplit) {
  const GemmShape& s = d.spec.shape;
  GemmParams p{};
  p.B = s.B, p.M = s.M, p.N = s.N, p.K = s.K;
  p.act_mxfp4 = d.spec.activations == ActivationMode::kMxfp4Even;
  p.x = d.x_bf16.data(), p.x_sb = d.xs.b, p.x_sm = d.xs.m, p.x_sk = d.xs.k;
  p.wp = d.packed.data(), p.wp_sb = d.w.packed_stride_b, p.wp_sn = d.w.packed_stride_n;
  p.ws = d.scales.data(), p.ws_sb = d.w.scale_stride_b, p.ws_sn = d.w.scale_stride_n;
  p.y = y, p.y_sb = d.ys.b, p.y_sm = d.ys.m;
  p.ksplit = ksplit;
  p.ktiles = static_cast<int>((s.K + kSimtBK - 1) / kSimtBK);
  if (ksplit < 1 || ksplit > p.ktiles) return absl::InvalidArgumentError("NUM_KSPLIT out of range");
  std::vector<float> partial(ksplit > 1 ? ksplit * s.B * s.M * s.N : 0);
  p.partial = partial.data();
  constexpr int T = SimtDefault::kThreads;
  std::vector<uint16_t> xs(kSimtBM * kSimtLDX), wd(kSimtBN * kSimtLDW);
  std::vector<float> acc(T * kSimtTM * kSimtTN);
  for (int bz = 0; bz < s.B * ksplit; ++bz)
    for (int by = 0; by < (s.M + kSimtBM - 1) / kSimtBM; ++by)
      for (int bx = 0; bx < (s.N + kSimtBN - 1) / kSimtBN; ++bx) {
        const TileCoord c = CtaCoord(p, bx, by, bz, kSimtBM, kSimtBN);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int kt = c.kt0; kt < c.kt1; ++kt) {
          for (int t = 0; t < T; ++t) SimtLoadPhase(p, c, kt, xs.data(), wd.data(), t);
          if (p.act_mxfp4) {
            for (int t = 0; t < T; ++t) FakeQuantXTile<kSimtBM, kSimtBK, kSimtLDX>(xs.data(), t, T);
          }
          for (int t = 0; t < T; ++t) SimtDefault::Mma(xs.data(), wd.data(), &acc[t * kSimtTM * kSimtTN], t);
        }
        for (int t = 0; t < T; ++t) SimtDefault::Store(p, c, &acc[t * kSimtTM * kSimtTN], t);
      }
  if (ksplit > 1) {  // the reduce kernel's loop
    const int64_t total = s.B * s.M * s.N;
    for (int64_t i = 0; i < total; ++i) {
      const int64_t n = i % s.N, m = (i / s.N) % s.M, b = i / (s.N * s.M);
      float a = 0;
      for (int sp = 0; sp < ksplit; ++sp) a += partial[sp * total + i];
      y[b * d.ys.b + m * d.ys.m + n] = mxfp4::FloatToBf16Bits(a);
    }
  }
  return absl::OkStatus();
}

struct Case {
  GemmShape shape;
  ActivationMode mode;
  OutputLayout layout;
  bool strided;
  int ksplit;
};

class SimtEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(SimtEmulation, MatchesReference) {
  const Case& c = GetParam();
  CaseSpec spec;
  spec.shape = c.shape;
  spec.activations = c.mode;
  spec.layout = c.layout;
  spec.strided_x = c.strided;
  spec.seed = c.shape.M * 31 + c.shape.K;
  auto d = CaseData::Build(spec);
  ASSERT_TRUE(d.ok());
  auto r = CheckKernel(*d, [&](const CaseData& dd, uint16_t* y) { return EmulateSimt(dd, y, c.ksplit); }, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->accuracy.verdict, reference::Verdict::kPass) << r->accuracy.reason;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SimtEmulation,
    ::testing::Values(Case{{2, 1, 64, 192}, ActivationMode::kBf16, OutputLayout::kHeadMajor, true, 1},
                      Case{{2, 33, 70, 192}, ActivationMode::kMxfp4Even, OutputLayout::kBatchMajor, true, 1},
                      Case{{1, 40, 128, 512}, ActivationMode::kBf16, OutputLayout::kBatchMajor, false, 4},
                      Case{{3, 7, 16, 128}, ActivationMode::kMxfp4Even, OutputLayout::kHeadMajor, false, 3},
                      Case{{2, 65, 100, 96}, ActivationMode::kBf16, OutputLayout::kHeadMajor, true, 2}));

TEST(SimtEmulation, DequantWTileNeverReadsPastKOver32) {
  // Scales past K/32 hold 0xFF (NaN): a read would poison the tile.
  CaseSpec spec;
  spec.shape = {1, 4, 64, 96};  // 3 groups: BK=32 tiles end exactly at K
  auto d = CaseData::Build(spec);
  ASSERT_TRUE(d.ok());
  GemmParams p{};
  p.B = 1, p.M = 4, p.N = 64, p.K = 96, p.ksplit = 1, p.ktiles = 3;
  p.wp = d->packed.data(), p.wp_sb = d->w.packed_stride_b, p.wp_sn = d->w.packed_stride_n;
  p.ws = d->scales.data(), p.ws_sb = d->w.scale_stride_b, p.ws_sn = d->w.scale_stride_n;
  TileCoord c{0, 0, 0, 0, 0, 3};
  std::vector<uint16_t> wd(64 * (128 + 8));
  // A 128-wide tile starting at k0 = 0 covers K = 96 plus a masked tail.
  for (int t = 0; t < 64; ++t) DequantWTile<64, 128, 136>(p, c, 0, nullptr, wd.data(), t, 64);
  for (int n = 0; n < 64; ++n) {
    for (int k = 0; k < 128; ++k) {
      const float v = mxfp4::Bf16BitsToFloat(wd[n * 136 + k]);
      ASSERT_FALSE(std::isnan(v)) << n << "," << k;
      if (k >= 96) {
        ASSERT_EQ(v, 0.0f);
      }
    }
  }
}

TEST(SimtEmulation, DequantIsExactForEveryByteAndScale) {
  // One 64-column tile: column n holds scale byte s, its 128 K elements hold
  // packed bytes 0..63 (two rows cover all 256 byte values). Both the integer
  // path (scales 2..252) and the exact float path must give
  // bf16(E2M1 * 2^(s-127)) bit for bit (NaN for 0xFF).
  for (int s0 = 0; s0 < 256; s0 += 64) {
    for (int half = 0; half < 4; ++half) {
      std::vector<uint8_t> packed(64 * 64), scales(64 * 4);
      for (int n = 0; n < 64; ++n) {
        for (int i = 0; i < 64; ++i) packed[n * 64 + i] = static_cast<uint8_t>(half * 64 + i);
        for (int g = 0; g < 4; ++g) scales[n * 4 + g] = static_cast<uint8_t>(s0 + n);
      }
      GemmParams p{};
      p.B = 1, p.M = 1, p.N = 64, p.K = 128, p.ksplit = 1, p.ktiles = 1;
      p.wp = packed.data(), p.wp_sb = 0, p.wp_sn = 64;
      p.ws = scales.data(), p.ws_sb = 0, p.ws_sn = 4;
      TileCoord c{0, 0, 0, 0, 0, 1};
      DequantLut lut;
      for (int t = 0; t < 32; ++t) BuildDequantLut(&lut, t, 32);
      for (const DequantLut* use : {static_cast<const DequantLut*>(nullptr), static_cast<const DequantLut*>(&lut)}) {
      std::vector<uint16_t> wd(64 * 136);
      for (int t = 0; t < 32; ++t) DequantWTile<64, 128, 136>(p, c, 0, nullptr, wd.data(), t, 32, nullptr, 0, 0, use);
      for (int n = 0; n < 64; ++n) {
        for (int k = 0; k < 128; ++k) {
          const uint8_t byte = packed[n * 64 + k / 2];
          const float want = mxfp4::DecodeE2M1((k & 1) ? byte >> 4 : byte & 15) * mxfp4::DecodeE8M0(scales[n * 4]);
          const uint16_t got = wd[n * 136 + k];
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(mxfp4::Bf16BitsToFloat(got)));
          } else {
            ASSERT_EQ(got, mxfp4::FloatToBf16Bits(want))
                << "scale " << int(scales[n * 4]) << " byte " << int(byte) << (use ? " (table)" : "");
          }
        }
      }
      }
    }
  }
}

// The prmt-table path of the wgmma panel and the decode kernel (byte
// permutes emulated on the CPU): every scale byte (the ones the tables cover
// and the exact fallback's) and every byte value in every byte position.
// The device runs the same words with its own prmt (gpu_kernel_test).
TEST(SimtEmulation, PrmtDequantIsExactForEveryByteAndScale) {
  std::vector<uint32_t> words(256 * 256 * 4);
  for (uint32_t s = 0; s < 256; ++s)
    for (uint32_t b = 0; b < 256; ++b) DequantSelfTestWords(s, b, &words[(s * 256 + b) * 4]);
  EXPECT_EQ(CheckDequantSelfTestWords(words.data()), "");
  // The check can fail: one flipped sign, one exponent off by one.
  std::vector<uint32_t> bad = words;
  bad[(130 * 256 + 0x23) * 4 + 2] ^= 0x80000000u;
  EXPECT_NE(CheckDequantSelfTestWords(bad.data()), "");
  bad = words;
  bad[(1 * 256 + 0x71) * 4] += 0x80u;
  EXPECT_NE(CheckDequantSelfTestWords(bad.data()), "");
  // The tables themselves at scale 2^0 (s = 127): 0, 0.5, 1, 1.5, 2, 3, 4, 6.
  const E2M1Tables t = MakeE2M1Tables(127);
  EXPECT_EQ(t.lo0, 0xC0800000u);
  EXPECT_EQ(t.hi0, 0x3F3F3F00u);
  EXPECT_EQ(t.lo1, 0xC0804000u);
  EXPECT_EQ(t.hi1, 0x40404040u);
  EXPECT_EQ(E2M1x8ViaTables(0x000000F8u, t).v[0], 0xC0C08000u);  // -0.0 low, -6 high
}

// The placement-and-multiply conversion of the register-sourced and decode
// kernels, bit for bit against the format library for every scale byte it
// covers (0..128: the subnormal products at small scale bytes included) and
// every byte at every byte position; the uncovered scale bytes fall back as
// the kernels' exact paths do.
TEST(SimtEmulation, MulDequantIsExactForEveryByteAndScale) {
  std::vector<uint32_t> words(256 * 256 * 4);
  for (uint32_t s = 0; s < 256; ++s)
    for (uint32_t b = 0; b < 256; ++b) DequantSelfTestWordsMul(s, b, &words[(s * 256 + b) * 4]);
  EXPECT_EQ(CheckDequantSelfTestWords(words.data()), "");
  EXPECT_TRUE(E2M1MulCover(0));
  EXPECT_TRUE(E2M1MulCover(128));
  EXPECT_FALSE(E2M1MulCover(129));
  // Each byte position by hand: byte j is 0xF8 (-0.0 low, -6 high) at scale
  // 2^0, the other bytes 0x77 (+6, +6), which must not leak into word j.
  for (int j = 0; j < 4; ++j) {
    const uint32_t w = (0x77777777u & ~(0xFFu << (8 * j))) | 0xF8u << (8 * j);
    const U32x4 r = E2M1x8ViaMul(w, E2M1MulScale(127));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], i == j ? 0xC0C08000u : 0x40C040C0u) << "byte " << j << ", word " << i;
  }
  // Code 1 (0.5) at scale byte 0: 2^-128, a bf16 subnormal (bits 0x0020).
  EXPECT_EQ(E2M1x8ViaMul(0x00000001u, E2M1MulScale(0)).v[0], 0x00000020u);
  // The check can fail on these words: a subnormal flushed to zero, one
  // sign flipped.
  std::vector<uint32_t> bad = words;
  bad[(0 * 256 + 0x01) * 4] &= 0xFFFF0000u;  // scale byte 0, code 0.5: 2^-128 -> 0
  EXPECT_NE(CheckDequantSelfTestWords(bad.data()), "");
  bad = words;
  bad[(127 * 256 + 0x35) * 4 + 1] ^= 0x00008000u;
  EXPECT_NE(CheckDequantSelfTestWords(bad.data()), "");
}

}  // namespace
}  // namespace mxval::gpu
