#include "kernels/cpu/a16wfp4_cpu.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dispatch/config_table.h"
#include "validation/validation_case.h"

namespace mxval::cpu {
namespace {

KernelFn CpuKernel(const TileConfig& config, bool scalar = false) {
  return [config, scalar](const CaseData& d, uint16_t* y) {
    CpuGemmArgs a;
    a.shape = d.spec.shape;
    a.activations = d.spec.activations;
    a.x = d.x_bf16.data();
    a.xs = d.xs;
    a.w = d.w;
    a.y = y;
    a.ys = d.ys;
    a.threads = 2;
    a.force_scalar = scalar;
    return RunA16WFP4(a, config);
  };
}

void ExpectPass(const CaseSpec& spec, const TileConfig& config, bool scalar = false) {
  auto data = CaseData::Build(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  CheckOptions opt;
  opt.threads = 2;
  auto r = CheckKernel(*data, CpuKernel(config, scalar), opt);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& s = spec.shape;
  EXPECT_EQ(r->accuracy.verdict, reference::Verdict::kPass)
      << "B=" << s.B << " M=" << s.M << " N=" << s.N << " K=" << s.K << " " << config.ToString() << " "
      << ActivationModeName(spec.activations) << " " << OutputLayoutName(spec.layout)
      << (spec.strided_x ? " strided" : "") << " x=" << spec.x_gen.ToString() << ": " << r->accuracy.reason;
  EXPECT_GT(r->accuracy.ref_norm, 0);
}

TEST(CpuKernel, TwoHundredFortySeededRandomShapesAndConfigs) {
  std::mt19937_64 rng(20261130);
  const int64_t kn[][2] = {{192, 512}, {512, 256}, {128, 512}, {512, 128}, {96, 48}, {256, 40}, {32, 16}};
  const int bms[] = {1, 5, 6, 16, 32, 48, 96, 128};
  const int bns[] = {16, 32, 64, 128};
  const int bks[] = {32, 64, 96, 128, 256, 512};
  const char* gens[] = {"normal", "heavy-tail", "uniform-codes", "mxfp4-exact", "normal:0.01"};
  for (int i = 0; i < 240; ++i) {
    CaseSpec spec;
    const auto& p = kn[rng() % 7];
    spec.shape = {static_cast<int64_t>(1 + rng() % 5), static_cast<int64_t>(1 + rng() % 300), p[1], p[0]};
    if (i % 10 == 0) spec.shape.B = 16;
    spec.activations = (rng() % 2) ? ActivationMode::kBf16 : ActivationMode::kMxfp4Even;
    spec.layout = (rng() % 2) ? OutputLayout::kHeadMajor : OutputLayout::kBatchMajor;
    spec.strided_x = rng() % 2;
    spec.x_gen = *ParseGenerator(gens[rng() % 5]);
    spec.w_gen = *ParseGenerator(gens[rng() % 3]);
    spec.w_rule = static_cast<mxfp4::ScaleRule>(rng() % 3);
    spec.seed = rng();
    TileConfig c;
    c.block_m = bms[rng() % 8];
    c.block_n = bns[rng() % 4];
    c.block_k = bks[rng() % 6];
    const int64_t kblocks = (spec.shape.K + c.block_k - 1) / c.block_k;
    c.ksplit = 1 + static_cast<int>(rng() % std::min<int64_t>(kblocks, 4));
    ASSERT_TRUE(CanImplement(spec.shape, c).ok()) << c.ToString();
    ExpectPass(spec, c);
  }
}

TEST(CpuKernel, EveryConfigInTheShippedTable) {
  auto table = ConfigTable::Load(MXVAL_SOURCE_DIR "/kernels/configs/cpu.json");
  ASSERT_TRUE(table.ok()) << table.status();
  const int64_t kn[][2] = {{192, 512}, {512, 256}, {128, 512}, {512, 128}};
  for (const DispatchEntry& e : table->AllEntries()) {
    for (const auto& p : kn) {
      for (int64_t M : {1, 4, 17, 255, 300}) {
        CaseSpec spec;
        spec.shape = {3, M, p[1], p[0]};
        spec.strided_x = true;
        spec.activations = M % 2 ? ActivationMode::kMxfp4Even : ActivationMode::kBf16;
        if (!CanImplement(spec.shape, e.config).ok()) continue;  // e.g. KSPLIT > K blocks
        SCOPED_TRACE(e.name);
        ExpectPass(spec, e.config);
      }
    }
  }
}

TEST(CpuKernel, RaggedKIsMaskedNotDropped) {
  // K = 192 with BLOCK_K 128 or 256: the last block is partial.
  for (int bk : {128, 256}) {
    CaseSpec spec;
    spec.shape = {2, 37, 512, 192};
    ExpectPass(spec, TileConfig{.block_m = 32, .block_n = 64, .block_k = bk});
  }
  CaseSpec spec;
  spec.shape = {2, 3, 64, 192};
  ExpectPass(spec, TileConfig{.block_m = 16, .block_n = 32, .block_k = 128, .ksplit = 2});
}

TEST(CpuKernel, ScalarFallbackMatchesReference) {
  CaseSpec spec;
  spec.shape = {2, 23, 80, 192};
  spec.activations = ActivationMode::kMxfp4Even;
  spec.strided_x = true;
  ExpectPass(spec, TileConfig{.block_m = 12, .block_n = 32, .block_k = 64, .ksplit = 3}, /*scalar=*/true);
}

TEST(CpuKernel, LargeMWithSampledReference) {
  CaseSpec spec;
  spec.shape = {2, 5000, 64, 128};
  ExpectPass(spec, TileConfig{.block_m = 96, .block_n = 64, .block_k = 128});
}

// Scale bytes at the ends of E8M0 (subnormal and near-maximum dequantized
// weights) with activations rescaled so those groups count: the case really
// holds them, the kernel matches the reference in both modes and on both
// paths, and a kernel that clamps them to the normal range fails.
TEST(CpuKernel, ExtremeScaleBytesMatchTheReference) {
  CaseSpec spec;
  spec.shape = {3, 19, 96, 512};
  spec.strided_x = true;
  spec.w_gen = *ParseGenerator("extreme-scales");
  spec.seed = 77;
  auto d = CaseData::Build(spec);
  ASSERT_TRUE(d.ok()) << d.status();
  int at_end[256] = {};
  for (int64_t r = 0; r < 3 * 96; ++r)
    for (int64_t g = 0; g < 512 / 32; ++g) ++at_end[d->w.scales[r * d->w.scale_stride_n + g]];
  EXPECT_GT(at_end[0] + at_end[1], 300);
  EXPECT_GT(at_end[253] + at_end[254], 300);
  for (auto mode : {ActivationMode::kBf16, ActivationMode::kMxfp4Even})
    for (bool scalar : {false, true}) {
      spec.activations = mode;
      ExpectPass(spec, TileConfig{.block_m = 16, .block_n = 32, .block_k = 128}, scalar);
    }
  // The test can fail: the same kernel on scales clamped into 2..252.
  CaseData clamped = *d;
  for (uint8_t& s : clamped.scales)
    if (s != mxfp4::kScaleNaN) s = std::clamp<uint8_t>(s, 2, 252);
  clamped.w.scales = clamped.scales.data();
  clamped.w.packed = clamped.packed.data();
  KernelFn on_clamped = [&](const CaseData&, uint16_t* y) {
    return CpuKernel(TileConfig{.block_m = 16, .block_n = 32, .block_k = 128})(clamped, y);
  };
  CheckOptions opt;
  opt.threads = 2;
  auto r = CheckKernel(*d, on_clamped, opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->accuracy.verdict, reference::Verdict::kPass) << r->accuracy.reason;  // catastrophic: 0.72 Frobenius
}

TEST(CpuKernel, CanImplementNamesTheField) {
  const GemmShape s{1, 8, 64, 192};
  struct Bad { TileConfig c; const char* field; } bad[] = {
      {{.block_m = 0}, "BLOCK_SIZE_M"},
      {{.block_m = 8, .block_n = 24}, "BLOCK_SIZE_N"},
      {{.block_m = 8, .block_n = 32, .block_k = 48}, "BLOCK_SIZE_K"},
      {{.block_m = 8, .block_n = 32, .block_k = 128, .ksplit = 3}, "NUM_KSPLIT"},  // 2 K blocks
      {{.block_m = 8, .block_n = 32, .block_k = 64, .ksplit = 0}, "NUM_KSPLIT"},
  };
  for (const Bad& b : bad) {
    const absl::Status st = CanImplement(s, b.c);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << b.c.ToString();
    EXPECT_NE(st.message().find(b.field), std::string::npos) << st;
  }
  EXPECT_FALSE(CanImplement({1, 8, 64, 100}, TileConfig{}).ok());  // K % 32
  EXPECT_TRUE(CanImplement(s, {.block_m = 8, .block_n = 32, .block_k = 64, .ksplit = 3}).ok());
  CpuGemmArgs a;
  a.shape = s;
  EXPECT_EQ(RunA16WFP4(a, TileConfig{}).code(), absl::StatusCode::kInvalidArgument);  // null pointers
}

TEST(CpuKernel, DeterministicAcrossThreadCounts) {
  CaseSpec spec;
  spec.shape = {3, 70, 128, 512};
  auto d = CaseData::Build(spec);
  ASSERT_TRUE(d.ok());
  const TileConfig c{.block_m = 24, .block_n = 64, .block_k = 128, .ksplit = 2};
  std::vector<uint16_t> y1(d->y_elems), y2(d->y_elems);
  CpuGemmArgs a{spec.shape, spec.activations, d->x_bf16.data(), d->xs, d->w, y1.data(), d->ys, 1};
  ASSERT_TRUE(RunA16WFP4(a, c).ok());
  a.y = y2.data();
  a.threads = 3;
  ASSERT_TRUE(RunA16WFP4(a, c).ok());
  EXPECT_EQ(y1, y2);
}

}  // namespace
}  // namespace mxval::cpu
