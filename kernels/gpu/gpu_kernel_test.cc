// GPU kernels vs the FP32 reference, on a CUDA device (run by
// scripts/gpu_check.sh on the H200; skipped where no device is present).
//
// The CUDA kernel library is loaded through the kernel ABI with dlopen, as a
// worker loads any kernel library. Every case mirrors the guarded host
// buffers to the device (scales past K/32 = 0xFF, packed bytes past K/2 =
// 0xFF, x rows past M = NaN, y poisoned), so over-reads and unwritten
// outputs fail. At the end a summary table per kernel, config and mode is
// printed.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/abi/kernel_library.h"
#include "validation/abi_kernel.h"

namespace mxval {
namespace {

#define CUDA_OK(expr)                                                                                   \
  do {                                                                                                  \
    cudaError_t e_ = (expr);                                                                            \
    if (e_ != cudaSuccess) return absl::InternalError(std::string(#expr ": ") + cudaGetErrorString(e_)); \
  } while (0)

std::string LibraryPath() {
  if (const char* env = std::getenv("MXVAL_CUDA_LIBRARY")) return env;
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe(buf, n > 0 ? n : 0);
  return exe.substr(0, exe.rfind('/')) + "/../lib/libmxval_cuda_kernels.so";
}

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

const KernelLibrary* Library() {
  static std::unique_ptr<KernelLibrary> lib = [] {
    auto l = KernelLibrary::Open(LibraryPath());
    if (!l.ok()) {
      fprintf(stderr, "%s\n", std::string(l.status().message()).c_str());
      return std::unique_ptr<KernelLibrary>();
    }
    return std::move(*l);
  }();
  return lib.get();
}

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;
  absl::Status Alloc(size_t count) {
    n = count;
    if (count == 0) return absl::OkStatus();
    CUDA_OK(cudaMalloc(&ptr, count * sizeof(T)));
    return absl::OkStatus();
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
};

// Runs a kernel of the CUDA library on device mirrors of the case's buffers.
KernelFn DeviceKernel(const mxval_kernel* kernel, const TileConfig& config) {
  return [kernel, config](const CaseData& d, uint16_t* y) -> absl::Status {
    DeviceBuffer<uint16_t> dx, dy;
    DeviceBuffer<uint8_t> dp, ds, dw;
    if (auto s = dx.Alloc(d.x_bf16.size()); !s.ok()) return s;
    if (auto s = dp.Alloc(d.packed.size()); !s.ok()) return s;
    if (auto s = ds.Alloc(d.scales.size()); !s.ok()) return s;
    if (auto s = dy.Alloc(d.y_elems); !s.ok()) return s;
    CUDA_OK(cudaMemcpy(dx.ptr, d.x_bf16.data(), d.x_bf16.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dp.ptr, d.packed.data(), d.packed.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(ds.ptr, d.scales.data(), d.scales.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dy.ptr, y, d.y_elems * 2, cudaMemcpyHostToDevice));  // poisoned
    mxval_gemm_args a = AbiArgsFor(d, dx.ptr, dp.ptr, ds.ptr, dy.ptr, nullptr, 0, nullptr);
    const mxval_tile_config c = ToAbi(config);
    const size_t ws = kernel->workspace_size(&a, &c);
    if (auto s = dw.Alloc(ws); !s.ok()) return s;
    if (ws)  // poison the workspace: its contents are undefined on entry CUDA_OK(cudaMemset(dw.ptr, 0xFF, ws));
    a.workspace = dw.ptr;
    a.workspace_bytes = ws;
    if (absl::Status s = Run(*kernel, a, config); !s.ok()) return s;
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(y, dy.ptr, d.y_elems * 2, cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  };
}

struct Tally {
  int cases = 0, passed = 0;
};
std::map<std::string, Tally>& Summary() {
  static auto* s = new std::map<std::string, Tally>();
  return *s;
}

void CheckCase(const mxval_kernel* k, const TileConfig& c, const CaseSpec& spec) {
  auto d = CaseData::Build(spec, int64_t{24} << 30);
  ASSERT_TRUE(d.ok()) << d.status();
  CheckOptions opt;
  opt.sample_above_m = 2048;
  opt.sample_rows = 384;
  auto r = CheckKernel(*d, DeviceKernel(k, c), opt);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string key = std::string(k->name) + " " + c.ToString() + " " + ActivationModeName(spec.activations);
  Tally& t = Summary()[key];
  ++t.cases;
  const bool pass = r->accuracy.verdict == reference::Verdict::kPass;
  t.passed += pass;
  const auto& s = spec.shape;
  EXPECT_TRUE(pass) << key << " B=" << s.B << " M=" << s.M << " N=" << s.N << " K=" << s.K << " "
                    << OutputLayoutName(spec.layout) << (spec.strided_x ? " strided" : "") << ": "
                    << r->accuracy.reason;
}

class GpuKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
    ASSERT_NE(Library(), nullptr) << "cannot load " << LibraryPath();
  }
};

// >= 300 seeded shapes; every (kernel, config, mode) gets several of them.
TEST_F(GpuKernels, SeededShapesAgainstReference) {
  std::vector<std::pair<const mxval_kernel*, TileConfig>> combos;
  for (const mxval_kernel* k : Library()->kernels())
    for (int i = 0; i < k->num_configs; ++i) combos.push_back({k, FromAbi(k->configs[i])});
  ASSERT_GE(combos.size(), 2u);
  const int64_t kn[][2] = {{192, 512}, {512, 256}, {128, 512}, {512, 128}};
  const int64_t bs[] = {1, 16, 128};
  const int64_t small_ms[] = {1, 2, 3, 4, 7, 16, 17, 31, 33, 64, 100, 127, 128, 129, 255, 256, 257, 511, 1000, 1024};
  const int64_t large_ms[] = {2047, 4096, 4099, 8192, 16384};
  std::mt19937_64 rng(20261130);
  int n = 0;
  for (int i = 0; i < 320; ++i) {
    CaseSpec spec;
    const auto& p = kn[i % 4];
    int64_t B = bs[(i / 4) % 3];
    int64_t M = small_ms[rng() % 20];
    if (i % 16 == 5) {
      M = large_ms[rng() % 5];
      B = (i % 32 == 5) ? 1 : 16;
    }
    if (B == 128 && M > 512) M = 512;
    spec.shape = {B, M, p[1], p[0]};
    // Independent of the config index so every config sees both modes.
    spec.activations = (i / static_cast<int>(combos.size())) % 2 ? ActivationMode::kMxfp4Even : ActivationMode::kBf16;
    spec.layout = (i / 3) % 2 ? OutputLayout::kBatchMajor : OutputLayout::kHeadMajor;
    spec.strided_x = (i % 5) < 3;
    spec.x_gen = *ParseGenerator(i % 7 == 0 ? "heavy-tail" : (i % 11 == 0 ? "mxfp4-exact" : "normal"));
    spec.w_gen = *ParseGenerator(i % 3 == 0 ? "uniform-codes" : "normal");
    spec.seed = rng();
    auto [k, c] = combos[i % combos.size()];
    const int64_t ktiles = (p[0] + c.block_k - 1) / c.block_k;
    if (i % 9 == 4 && ktiles > 1) c.ksplit = 2 + static_cast<int>(rng() % std::min<int64_t>(ktiles - 1, 3));
    SCOPED_TRACE(i);
    CheckCase(k, c, spec);
    ++n;
  }
  EXPECT_GE(n, 300);
}

TEST_F(GpuKernels, RaggedKAndEveryConfigAtK192) {
  for (const mxval_kernel* k : Library()->kernels())
    for (int i = 0; i < k->num_configs; ++i)
      for (auto mode : {ActivationMode::kBf16, ActivationMode::kMxfp4Even}) {
        CaseSpec spec;
        spec.shape = {16, 77, 512, 192};
        spec.strided_x = true;
        spec.activations = mode;
        CheckCase(k, FromAbi(k->configs[i]), spec);
      }
}

TEST_F(GpuKernels, DeterministicBitForBit) {
  auto k = Library()->Find("a16wfp4_tc");
  ASSERT_TRUE(k.ok());
  CaseSpec spec;
  spec.shape = {16, 300, 256, 512};
  auto d = CaseData::Build(spec);
  ASSERT_TRUE(d.ok());
  const TileConfig c = FromAbi((*k)->configs[5]);
  std::vector<uint16_t> y1(d->y_elems, 1), y2(d->y_elems, 2);
  ASSERT_TRUE(DeviceKernel(*k, c)(*d, y1.data()).ok());
  ASSERT_TRUE(DeviceKernel(*k, c)(*d, y2.data()).ok());
  EXPECT_EQ(y1, y2);
}

TEST_F(GpuKernels, RejectsWhatItCannotDo) {
  auto k = Library()->Find("a16wfp4_tc");
  ASSERT_TRUE(k.ok());
  mxval_gemm_args a{};
  a.B = 1, a.M = 8, a.N = 64, a.K = 192, a.x_stride_k = 1;
  uint16_t dummy[8];
  a.x = a.y = dummy;
  a.w_packed = a.w_scales = reinterpret_cast<const uint8_t*>(dummy);
  EXPECT_FALSE(CanImplement(**k, a, TileConfig{.block_m = 24, .block_n = 64, .block_k = 64}).ok());
  EXPECT_FALSE(CanImplement(**k, a, TileConfig{.block_m = 16, .block_n = 64, .block_k = 64, .ksplit = 4,
                                               .num_stages = 2, .num_warps = 4})
                   .ok());  // 3 K tiles
  a.x_stride_k = 2;
  EXPECT_FALSE(CanImplement(**k, a, TileConfig{.block_m = 16, .block_n = 64, .block_k = 64, .ksplit = 1,
                                               .num_stages = 2, .num_warps = 4})
                   .ok());
}

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    if (Summary().empty()) return;
    printf("\n%-58s %6s %6s\n", "kernel config mode", "cases", "pass");
    int cases = 0, passed = 0;
    for (const auto& [k, t] : Summary()) {
      printf("%-58s %6d %6d%s\n", k.c_str(), t.cases, t.passed, t.passed == t.cases ? "" : "  <-- FAILURES");
      cases += t.cases;
      passed += t.passed;
    }
    printf("%-58s %6d %6d\n", "total", cases, passed);
  }
};
const auto* kPrinter = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

}  // namespace
}  // namespace mxval
