// The kernel ABI end to end: built-in kernels and external plugins are found,
// validated and (for the buggy plugin) caught through the same path.
#include <dlfcn.h>

#include <algorithm>
#include <set>

#include "gtest/gtest.h"
#include "kernels/abi/kernel_library.h"
#include "kernels/cpu/cpu_kernel_library.h"
#include "validation/abi_kernel.h"

namespace mxval {
namespace {

reference::AccuracyReport Validate(const mxval_kernel* k, const TileConfig& c, GemmShape shape, bool strided) {
  CaseSpec spec;
  spec.shape = shape;
  spec.strided_x = strided;
  spec.layout = OutputLayout::kBatchMajor;
  auto d = CaseData::Build(spec);
  EXPECT_TRUE(d.ok()) << d.status();
  auto r = CheckKernel(*d, HostAbiKernel(k, c), {});
  if (!r.ok()) {
    ADD_FAILURE() << r.status();
    return {};
  }
  return r->accuracy;
}

TEST(KernelAbi, BuiltInCpuKernelThroughTheAbi) {
  auto lib = KernelLibrary::FromTable(cpu::CpuKernelLibrary());
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ((*lib)->name(), "mxval-builtin-cpu");
  auto k = (*lib)->Find("a16wfp4_cpu");
  ASSERT_TRUE(k.ok());
  ASSERT_GT((*k)->num_configs, 0);
  for (int i = 0; i < (*k)->num_configs; ++i) {
    const TileConfig c = FromAbi((*k)->configs[i]);
    const int64_t K = c.ksplit * c.block_k > 192 ? 512 : 192;  // a K the split fits
    auto r = Validate(*k, c, {3, 37, 96, K}, true);
    EXPECT_EQ(r.verdict, reference::Verdict::kPass) << c.ToString() << ": " << r.reason;
  }
  // can_implement failures come back as INVALID_ARGUMENT naming the field.
  mxval_gemm_args a{};
  a.B = 1, a.M = 1, a.N = 16, a.K = 64;
  const absl::Status st = CanImplement(**k, a, TileConfig{.block_m = 8, .block_n = 24, .block_k = 32});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("BLOCK_SIZE_N"), std::string::npos) << st;
  EXPECT_FALSE((*lib)->Find("nope").ok());
}

TEST(KernelAbi, ExamplePluginLoadsAndPasses) {
  auto lib = KernelLibrary::Open(MXVAL_EXAMPLE_PLUGIN);
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ((*lib)->build_id(), "example-1");
  auto k = (*lib)->Find("example_naive");
  ASSERT_TRUE(k.ok());
  for (int64_t K : {128, 192}) {
    auto r = Validate(*k, TileConfig{}, {2, 9, 40, K}, true);
    EXPECT_EQ(r.verdict, reference::Verdict::kPass) << r.reason;
  }
}

TEST(KernelAbi, BuggyPluginIsCaughtOnlyWhereItIsWrong) {
  auto lib = KernelLibrary::Open(MXVAL_BUGGY_PLUGIN);
  ASSERT_TRUE(lib.ok()) << lib.status();
  auto k = (*lib)->Find("example_naive");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(Validate(*k, TileConfig{}, {2, 9, 40, 128}, false).verdict, reference::Verdict::kPass);
  const auto r = Validate(*k, TileConfig{}, {2, 9, 40, 192}, false);
  EXPECT_EQ(r.verdict, reference::Verdict::kFailCatastrophic) << r.reason;
}

// Each build breaks one promise of kernel_api.h that a test shape alone would
// not show (its y values are right): the harness's guards and poison catch it.
TEST(KernelAbi, EveryPromiseOfTheAbiIsChecked) {
  struct Case {
    const char* lib;
    reference::Verdict verdict;
    const char* reason;
  };
  const Case cases[] = {
      {"y_overrun", reference::Verdict::kFailOutOfBounds, "after its last"},
      {"y_underrun", reference::Verdict::kFailOutOfBounds, "before its first"},
      {"ws_overrun", reference::Verdict::kFailOutOfBounds, "past the end of its 64-byte workspace"},
      {"ws_uninit", reference::Verdict::kFailNonFinite, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.lib);
    auto lib = KernelLibrary::Open(std::string(MXVAL_PLUGIN_DIR) + "/libexample_plugin_" + c.lib + ".so");
    ASSERT_TRUE(lib.ok()) << lib.status();
    auto k = (*lib)->Find("example_naive");
    ASSERT_TRUE(k.ok());
    for (const bool strided : {false, true}) {
      const auto r = Validate(*k, TileConfig{}, {2, 9, 40, 128}, strided);
      EXPECT_EQ(r.verdict, c.verdict) << r.reason;
      EXPECT_NE(r.reason.find(c.reason), std::string::npos) << r.reason;
    }
  }
}

// Runs a kernel on `spec` through the harness (can_implement asked first).
absl::StatusOr<reference::AccuracyReport> Check(const mxval_kernel* k, const CaseSpec& spec) {
  auto d = CaseData::Build(spec);
  if (!d.ok()) return d.status();
  auto r = CheckKernel(*d, HostAbiKernel(k, TileConfig{}), {});
  if (!r.ok()) return r.status();
  return r->accuracy;
}

const mxval_kernel* PluginKernel(const std::string& build) {
  static std::vector<std::unique_ptr<KernelLibrary>> keep;
  auto lib = KernelLibrary::Open(std::string(MXVAL_PLUGIN_DIR) + "/libexample_plugin" + build + ".so");
  EXPECT_TRUE(lib.ok()) << lib.status();
  if (!lib.ok()) return nullptr;
  keep.push_back(std::move(*lib));
  auto k = keep.back()->Find("example_naive");
  return k.ok() ? *k : nullptr;
}

// x_stride_k != 1 (kernel_api.h allows it) in both layouts that give it: a
// correct kernel passes, one that assumes a unit stride fails, and one that
// declines it in can_implement is never run.
TEST(KernelAbi, XStridesBeyondTheRowPitchAreChecked) {
  const mxval_kernel* good = PluginKernel("");
  const mxval_kernel* dense = PluginKernel("_dense_x");
  const mxval_kernel* declines = PluginKernel("_decline_strided");
  ASSERT_TRUE(good && dense && declines);
  for (const XLayout layout : {XLayout::kKStrided, XLayout::kMMajor}) {
    SCOPED_TRACE(XLayoutName(layout));
    CaseSpec spec;
    spec.shape = {2, 5, 40, 192};
    spec.layout = OutputLayout::kBatchMajor;
    spec.x_layout = layout;
    spec.strided_x = layout == XLayout::kKStrided;  // pitch 2K + extra
    auto d = CaseData::Build(spec);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_NE(d->xs.k, 1);
    auto r = Check(good, spec);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->verdict, reference::Verdict::kPass) << r->reason;
    r = Check(dense, spec);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NE(r->verdict, reference::Verdict::kPass);
    r = Check(declines, spec);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_NE(r.status().message().find("declined by can_implement"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("needs x_stride_k == 1"), std::string::npos) << r.status();
    EXPECT_TRUE(r.status().GetPayload(kDeclinedPayload).has_value()) << "marked as the kernel's decision";
  }
  // The row-pitch layout alone keeps x_stride_k = 1: all three pass.
  CaseSpec spec;
  spec.shape = {2, 5, 40, 192};
  spec.strided_x = true;
  for (const mxval_kernel* k : {good, dense, declines}) {
    auto r = Check(k, spec);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->verdict, reference::Verdict::kPass) << r->reason;
  }
  spec.x_layout = XLayout::kMMajor;
  EXPECT_EQ(CaseData::Build(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

// NaN and Inf inside K: the expected outputs follow the format's rules; a
// kernel that decodes the NaN scale as a number fails, with a reason that
// says only the special-value outputs differ.
TEST(KernelAbi, SpecialValuesFollowTheFormatsRules) {
  const mxval_kernel* good = PluginKernel("");
  const mxval_kernel* naive = PluginKernel("_nan_scale");
  ASSERT_TRUE(good && naive);
  for (const int64_t M : {1, 2, 7}) {
    SCOPED_TRACE(M);
    CaseSpec spec;
    spec.shape = {3, M, 48, 128};
    spec.specials = SpecialValues::kMixed;
    spec.seed = 11;
    auto d = CaseData::Build(spec);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(d->special_b, 2);
    // One row in each of the last batches, leaving one row (of B * M) finite.
    ASSERT_EQ(d->special_rows.size(), M == 1 ? 2u : 3u);
    for (size_t i = 0; i < d->special_rows.size(); ++i) EXPECT_EQ(d->special_rows[i].first, 2 - static_cast<int64_t>(i));
    auto ref = ComputeReference(*d, {});
    ASSERT_TRUE(ref.ok());
    int64_t nonfinite = 0, special_outputs = 0;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < 48; ++n) {
          const float w = ref->want[b * d->ys.b + m * d->ys.m + n];
          const bool special = d->IsSpecialOutput(b, m, n);
          special_outputs += special;
          nonfinite += !std::isfinite(w);
          // Exactly the outputs fed by a special value are non-finite.
          EXPECT_EQ(special, !std::isfinite(w)) << b << "," << m << "," << n;
          if (b == 2 && n == d->special_n) {
            EXPECT_TRUE(std::isnan(w));  // NaN scale: the whole column
          }
        }
    EXPECT_GT(nonfinite, M);
    auto r = Check(good, spec);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->verdict, reference::Verdict::kPass) << r->reason;
    r = Check(naive, spec);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->verdict, reference::Verdict::kFailMismatch) << r->reason;
    EXPECT_NE(r->reason.find("only the"), std::string::npos) << r->reason;
    EXPECT_NE(r->reason.find("fed by NaN/Inf inputs"), std::string::npos) << r->reason;
    // Breaking the format's rules is never within max_mismatch_fraction.
    {
      auto d2 = CaseData::Build(spec);
      ASSERT_TRUE(d2.ok());
      CheckOptions lenient;
      lenient.tolerance.max_mismatch_fraction = 0.9;
      auto r2 = CheckKernel(*d2, HostAbiKernel(naive, TileConfig{}), lenient);
      ASSERT_TRUE(r2.ok());
      EXPECT_EQ(r2->accuracy.verdict, reference::Verdict::kFailMismatch) << r2->accuracy.reason;
      EXPECT_GT(r2->accuracy.special_mismatch_count, 0);
      // Sampled reference rows always include the rows fed by special values.
      CheckOptions sampled;
      sampled.sample_above_m = 0;
      sampled.sample_rows = 1;
      auto ref2 = ComputeReference(*d2, sampled);
      ASSERT_TRUE(ref2.ok());
      for (const auto& [b, m] : d2->special_rows) {
        EXPECT_TRUE(std::find(ref2->rows.begin(), ref2->rows.end(), m) != ref2->rows.end()) << m;
      }
    }
    // Without special values the naive decode is right.
    spec.specials = SpecialValues::kNone;
    r = Check(naive, spec);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->verdict, reference::Verdict::kPass) << r->reason;
  }
}

// With one batch the three special rows are rows of it (as many as M has).
TEST(KernelAbi, SpecialValuesWithOneBatch) {
  for (const int64_t M : {1, 2, 5}) {
    CaseSpec spec;
    spec.shape = {1, M, 32, 64};
    spec.specials = SpecialValues::kMixed;
    auto d = CaseData::Build(spec);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(static_cast<int64_t>(d->special_rows.size()), std::min<int64_t>(M - 1, 3));
    std::set<int64_t> rows;
    for (const auto& [b, m] : d->special_rows) {
      EXPECT_EQ(b, 0);
      rows.insert(m);
    }
    EXPECT_EQ(rows.size(), d->special_rows.size()) << "distinct rows";
    auto r = Check(PluginKernel(""), spec);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->verdict, reference::Verdict::kPass) << r->reason;
  }
}

// The version-1 layout of mxval_kernel (before launch_flags), as a library
// built against the version-1 header lays out its table.
struct KernelV1 {
  const char* name;
  int32_t device;
  const char* archs;
  uint32_t activation_modes;
  const mxval_tile_config* configs;
  int32_t num_configs;
  int32_t (*can_implement)(const mxval_gemm_args*, const mxval_tile_config*, char*, size_t);
  size_t (*workspace_size)(const mxval_gemm_args*, const mxval_tile_config*);
  int32_t (*run)(const mxval_gemm_args*, const mxval_tile_config*, char*, size_t);
};

TEST(KernelAbi, VersionOneLibrariesLoadWithNoLaunchFlags) {
  const mxval_kernel& cpu = cpu::CpuKernelLibrary()->kernels[0];
  static_assert(sizeof(KernelV1) < sizeof(mxval_kernel), "version 2 appends launch_flags");
  // Two entries, so a wrong stride would misread the second one.
  KernelV1 v1[2];
  for (int i = 0; i < 2; ++i) {
    v1[i] = {i == 0 ? "first" : "second", cpu.device, cpu.archs, cpu.activation_modes, cpu.configs,
             cpu.num_configs, cpu.can_implement, cpu.workspace_size, cpu.run};
  }
  mxval_kernel_library table = *cpu::CpuKernelLibrary();
  table.abi_version = 1;
  table.num_kernels = 2;
  table.kernels = reinterpret_cast<const mxval_kernel*>(v1);
  auto lib = KernelLibrary::FromTable(&table);
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ((*lib)->abi_version(), 1u);
  auto second = (*lib)->Find("second");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->run, cpu.run);
  EXPECT_EQ((*second)->num_configs, cpu.num_configs);
  EXPECT_EQ((*second)->launch_flags, 0u);
  EXPECT_EQ(Validate(*second, TileConfig{}, {2, 9, 40, 128}, false).verdict, reference::Verdict::kPass);
  // Version 2 is read in place, launch_flags included.
  mxval_kernel v2[1] = {cpu};
  v2[0].launch_flags = MXVAL_LAUNCH_PDL;
  table.abi_version = 2;
  table.num_kernels = 1;
  table.kernels = v2;
  lib = KernelLibrary::FromTable(&table);
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ((*lib)->kernels()[0]->launch_flags, uint32_t{MXVAL_LAUNCH_PDL});
  table.abi_version = 0;
  EXPECT_EQ(KernelLibrary::FromTable(&table).status().code(), absl::StatusCode::kFailedPrecondition);
  // Version 3 has version 2's table layout (it adds config_json to the args).
  table.abi_version = 3;
  lib = KernelLibrary::FromTable(&table);
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ((*lib)->kernels()[0]->launch_flags, uint32_t{MXVAL_LAUNCH_PDL});
  table.abi_version = 4;
  const auto st = KernelLibrary::FromTable(&table).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("speaks 1 to 3"), std::string::npos) << st;
}

// What a kernel saw of its config in its last call (ConfigSpy's entry points).
std::string g_seen_json;
bool g_seen_null = false;
int32_t ConfigSpy(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  g_seen_null = a->config_json == nullptr;
  g_seen_json = a->config_json != nullptr ? a->config_json : "";
  return 0;
}
size_t ConfigSpyWorkspace(const mxval_gemm_args* a, const mxval_tile_config* c) {
  return a->config_json != nullptr ? std::string(a->config_json).size() : 0;
}

TEST(KernelAbi, EveryEntryPointGetsTheConfigObjectVerbatim) {
  mxval_kernel k{};
  k.name = "spy";
  k.archs = "cpu";
  k.can_implement = ConfigSpy;
  k.run = ConfigSpy;
  k.workspace_size = ConfigSpyWorkspace;
  mxval_gemm_args args{};
  TileConfig c;
  c.json = R"({"BLOCK_SIZE_M":16,"waves_per_eu":2})";
  ASSERT_TRUE(mxval::Run(k, args, c).ok());
  EXPECT_EQ(g_seen_json, c.json);
  ASSERT_TRUE(CanImplement(k, args, c).ok());
  EXPECT_EQ(g_seen_json, c.json);
  EXPECT_EQ(WorkspaceSize(k, args, c), c.json.size());
  c.json.clear();  // a bare tile config: no JSON, NULL
  ASSERT_TRUE(mxval::Run(k, args, c).ok());
  EXPECT_TRUE(g_seen_null);
}

TEST(KernelAbi, LoaderErrors) {
  EXPECT_EQ(KernelLibrary::Open("/nonexistent/libx.so").status().code(), absl::StatusCode::kNotFound);
  // A real shared object without the symbol.
  EXPECT_EQ(KernelLibrary::Open("libm.so.6").status().code(), absl::StatusCode::kNotFound);
  mxval_kernel_library bad = *cpu::CpuKernelLibrary();
  bad.abi_version = 99;
  EXPECT_EQ(KernelLibrary::FromTable(&bad).status().code(), absl::StatusCode::kFailedPrecondition);
  mxval_kernel twice[2] = {cpu::CpuKernelLibrary()->kernels[0], cpu::CpuKernelLibrary()->kernels[0]};
  bad = *cpu::CpuKernelLibrary();
  bad.num_kernels = 2;
  bad.kernels = twice;
  EXPECT_EQ(KernelLibrary::FromTable(&bad).status().code(), absl::StatusCode::kInvalidArgument);
  twice[1].name = "other";
  twice[1].run = nullptr;
  EXPECT_EQ(KernelLibrary::FromTable(&bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelLibrary::FromTable(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mxval
