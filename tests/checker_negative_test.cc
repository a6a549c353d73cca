// The checker must catch the bugs that real A16WFP4 kernels have shipped with.
// Each test wraps the (correct) CPU kernel with an injected bug and asserts
// the verdict is a failure of the expected kind; a control run of the
// unmodified kernel on the same case passes, so the failure is the bug's.
#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/a16wfp4_cpu.h"
#include "validation/validation_case.h"

namespace mxval {
namespace {

using reference::Verdict;

const TileConfig kConfig{.block_m = 16, .block_n = 64, .block_k = 64};

absl::Status RunCpu(const CaseData& d, uint16_t* y, GemmShape shape, const TileConfig& c = kConfig) {
  cpu::CpuGemmArgs a{shape, d.spec.activations, d.x_bf16.data(), d.xs, d.w, y, d.ys, 2};
  return cpu::RunA16WFP4(a, c);
}

reference::AccuracyReport Check(const CaseSpec& spec, const KernelFn& k) {
  auto d = CaseData::Build(spec);
  EXPECT_TRUE(d.ok()) << d.status();
  CheckOptions opt;
  auto r = CheckKernel(*d, k, opt);
  EXPECT_TRUE(r.ok()) << r.status();
  return r->accuracy;
}

CaseSpec Kup192() {
  CaseSpec s;
  s.shape = {4, 33, 512, 192};
  s.strided_x = true;
  return s;
}

TEST(Negative, ControlPasses) {
  auto r = Check(Kup192(), [](const CaseData& d, uint16_t* y) { return RunCpu(d, y, d.spec.shape); });
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.reason;
}

TEST(Negative, ZeroedOutput) {
  auto r = Check(Kup192(), [](const CaseData& d, uint16_t* y) {
    std::fill(y, y + d.y_elems, uint16_t{0});
    return absl::OkStatus();
  });
  EXPECT_EQ(r.verdict, Verdict::kFailCatastrophic) << r.reason;
}

TEST(Negative, RaggedKMaskDropsHalfOfK192) {
  // The shipped bug: a mask that zeroes K beyond 96 when K=192.
  auto r = Check(Kup192(), [](const CaseData& d, uint16_t* y) {
    GemmShape half = d.spec.shape;
    half.K = 96;
    return RunCpu(d, y, half);
  });
  EXPECT_EQ(r.verdict, Verdict::kFailCatastrophic) << r.reason;
  EXPECT_GT(r.rel_fro_err, 0.3);
}

TEST(Negative, ScaleLoadPastKOver32ReadsNaN) {
  // Unmasked scale load: one group past K/32 where the guard holds 0xFF.
  auto r = Check(Kup192(), [](const CaseData& d, uint16_t* y) {
    GemmShape over = d.spec.shape;
    over.K += 32;
    return RunCpu(d, y, over);
  });
  EXPECT_EQ(r.verdict, Verdict::kFailNonFinite) << r.reason;
  EXPECT_EQ(r.nan_count, r.checked);
}

TEST(Negative, UnwrittenLastRow) {
  auto r = Check(Kup192(), [](const CaseData& d, uint16_t* y) {
    GemmShape fewer = d.spec.shape;
    fewer.M -= 1;  // ragged-M bug: last row never stored
    return RunCpu(d, y, fewer);
  });
  EXPECT_EQ(r.verdict, Verdict::kFailUnwritten) << r.reason;
  EXPECT_EQ(r.unwritten_count, 4 * 512);  // one row per batch
  EXPECT_NE(r.reason.find("m=32"), std::string::npos) << r.reason;
}

TEST(Negative, SplitKGarbageAtSmallM) {
  // Split-K with an uninitialised partial for the first rows: the output is
  // finite but wrong for a few rows only.
  CaseSpec spec;
  spec.shape = {4, 3, 256, 512};
  spec.layout = OutputLayout::kBatchMajor;
  auto r = Check(spec, [](const CaseData& d, uint16_t* y) {
    absl::Status st = RunCpu(d, y, d.spec.shape, {.block_m = 16, .block_n = 64, .block_k = 128, .ksplit = 4});
    std::mt19937 rng(1);
    for (int64_t n = 0; n < d.spec.shape.N; n += 7) y[d.ys.m * 1 + n] ^= static_cast<uint16_t>(rng() & 0x3FFF);
    return st;
  });
  EXPECT_TRUE(r.verdict == Verdict::kFailMismatch || r.verdict == Verdict::kFailCatastrophic ||
              r.verdict == Verdict::kFailNonFinite)
      << r.reason;
  ASSERT_FALSE(r.first_mismatches.empty());
  EXPECT_EQ(r.first_mismatches[0].m, 1);
}

TEST(Negative, Mxfp4ExactActivationsHideAMissingRequantization) {
  // A kernel that forgets to re-quantize activations in mxfp4-even mode:
  // invisible with MXFP4-exact inputs (what AITER's test feeds), caught with
  // ordinary activations. This is why mxval never relies on exact inputs.
  const KernelFn skips_requant = [](const CaseData& d, uint16_t* y) {
    cpu::CpuGemmArgs a{d.spec.shape, ActivationMode::kBf16, d.x_bf16.data(), d.xs, d.w, y, d.ys, 2};
    return cpu::RunA16WFP4(a, kConfig);
  };
  CaseSpec spec = Kup192();
  spec.activations = ActivationMode::kMxfp4Even;
  spec.x_gen = *ParseGenerator("mxfp4-exact");
  EXPECT_EQ(Check(spec, skips_requant).verdict, Verdict::kPass);
  spec.x_gen = *ParseGenerator("normal");
  const auto r = Check(spec, skips_requant);
  EXPECT_NE(r.verdict, Verdict::kPass) << r.reason;
  EXPECT_GT(r.mismatch_fraction, 0.1);
}

TEST(Negative, OffByOneBatchStride) {
  auto r = Check(Kup192(), [](const CaseData& d, uint16_t* y) {
    CaseData shifted = d;  // reads batch b's weights for b+1 (wrong stride)
    shifted.w.packed_stride_b = 0;
    shifted.w.scale_stride_b = 0;
    cpu::CpuGemmArgs a{d.spec.shape, d.spec.activations, d.x_bf16.data(), d.xs, shifted.w, y, d.ys, 2};
    return cpu::RunA16WFP4(a, kConfig);
  });
  EXPECT_EQ(r.verdict, Verdict::kFailCatastrophic) << r.reason;
}

// A kernel with a fast path for scale rows on 16-byte boundaries (dense
// K = 512 rows are 16 bytes) that reads each 4-byte word's scale bytes in
// reverse order. The guarded layout must keep the rows as aligned as dense
// ones, or the path production runs is never validated: with the old fixed
// guard of 2 groups (18-byte rows) the same kernel passes.
TEST(Negative, ScalePathTakenOnlyOnAlignedRows) {
  const KernelFn fast_path_bug = [](const CaseData& d, uint16_t* y) {
    WeightView w = d.w;
    std::vector<uint8_t> reversed;
    if (w.scale_stride_n % 16 == 0 && w.scale_stride_b % 16 == 0) {
      reversed = d.scales;
      for (size_t i = 0; i + 4 <= reversed.size(); i += 4) std::reverse(reversed.begin() + i, reversed.begin() + i + 4);
      w.scales = reversed.data();
    }
    cpu::CpuGemmArgs a{d.spec.shape, d.spec.activations, d.x_bf16.data(), d.xs, w, y, d.ys, 2};
    return cpu::RunA16WFP4(a, kConfig);
  };
  CaseSpec spec;
  spec.shape = {4, 33, 128, 512};  // DeepSeek-V3 V-up's (N, K)
  spec.w_gen = *ParseGenerator("normal");
  auto r = Check(spec, fast_path_bug);
  EXPECT_EQ(r.verdict, Verdict::kFailCatastrophic) << r.reason;
  spec.guard_groups = 2;
  EXPECT_EQ(Check(spec, fast_path_bug).verdict, Verdict::kPass);
}

// The default guard keeps the dense layout's power-of-two alignment of the
// scale rows and batches, and still poisons at least one group per row.
TEST(Negative, DefaultScaleGuardKeepsTheDenseAlignment) {
  const auto lowbit = [](int64_t v) { return v & -v; };
  for (int64_t K = 32; K <= 4096; K += 32) {
    const int64_t guard = DefaultScaleGuardGroups(K), srow = K / 32 + guard;
    EXPECT_GE(guard, 2) << K;
    EXPECT_EQ(lowbit(srow), lowbit(K / 32)) << K;
    for (int64_t N : {1, 72, 128, 200, 512}) EXPECT_EQ(lowbit(N * srow), lowbit(N * K / 32)) << K << " " << N;
  }
  CaseSpec spec;
  spec.shape = {2, 5, 24, 192};
  auto d = CaseData::Build(spec);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->w.scale_stride_n, 6 + 4);
  for (int64_t r = 0; r < 2 * 24; ++r)
    for (int64_t g = 6; g < 10; ++g) EXPECT_EQ(d->scales[r * 10 + g], mxfp4::kScaleNaN) << r << " " << g;
}

}  // namespace
}  // namespace mxval
