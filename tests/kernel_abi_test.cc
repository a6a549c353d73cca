// The kernel ABI end to end: built-in kernels and external plugins are found,
// validated and (for the buggy plugin) caught through the same path.
#include <dlfcn.h>

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
