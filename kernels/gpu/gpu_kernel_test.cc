// GPU kernels vs the FP32 reference, on a CUDA device (run by
// scripts/gpu_check.sh on the H200; skipped where no device is present).
//
// The CUDA kernel library is loaded through the kernel ABI with dlopen, and
// device memory comes from the worker's device-runtime layer, exactly as a
// worker runs a task. Every case mirrors the guarded host
// buffers to the device (scales past K/32 = 0xFF, packed bytes past K/2 =
// 0xFF, x rows past M = NaN, y poisoned), so over-reads and unwritten
// outputs fail. At the end a summary table per kernel, config and mode is
// printed.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/abi/kernel_library.h"
#include "kernels/gpu/dequant_selftest_check.h"
#include "kernels/runtime/device_clocks.h"
#include "kernels/runtime/device_runtime.h"
#include "validation/abi_kernel.h"
#include "validation/device_case.h"
#include "validation/roofline.h"

namespace mxval {
namespace {

std::string LibraryPath() {
  if (const char* env = std::getenv("MXVAL_CUDA_LIBRARY")) return env;
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe(buf, n > 0 ? n : 0);
  return exe.substr(0, exe.rfind('/')) + "/../lib/libmxval_cuda_kernels.so";
}

// The CUDA runtime through the worker's device-runtime layer (the driver
// API via dlopen), device 0; null when there is no usable device.
DeviceRuntime* Cuda() {
  static std::unique_ptr<DeviceRuntime> rt = []() -> std::unique_ptr<DeviceRuntime> {
    auto r = OpenCudaRuntime();
    if (!r.ok()) return nullptr;
    auto devs = (*r)->Devices();
    if (!devs.ok() || devs->empty() || !(*r)->SetDevice(0).ok()) return nullptr;
    return std::move(*r);
  }();
  return rt.get();
}

bool HaveDevice() { return Cuda() != nullptr; }

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

// Runs a kernel of the CUDA library on device mirrors of the case's guarded
// buffers (validation/device_case.h: y poisoned, workspace poisoned, the
// device synchronized so faults surface in this case).
absl::StatusOr<CaseResult> CheckOnDevice(const CaseData& d, const mxval_kernel* kernel, const TileConfig& config,
                                         const CheckOptions& opt, uint32_t launch_flags = 0) {
  auto mirror = DeviceCase::Upload(*Cuda(), d);
  if (!mirror.ok()) return mirror.status();
  return CheckKernel(d, (*mirror)->Kernel(kernel, config, launch_flags), opt);
}

struct Tally {
  int cases = 0, passed = 0;
};
std::map<std::string, Tally>& Summary() {
  static auto* s = new std::map<std::string, Tally>();
  return *s;
}

void CheckCase(const mxval_kernel* k, const TileConfig& c, const CaseSpec& spec, uint32_t launch_flags = 0) {
  auto d = CaseData::Build(spec, int64_t{24} << 30);
  ASSERT_TRUE(d.ok()) << d.status();
  CheckOptions opt;
  opt.sample_above_m = 2048;
  opt.sample_rows = 384;
  auto r = CheckOnDevice(*d, k, c, opt, launch_flags);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string key = std::string(k->name) + " " + c.ToString() + " " + ActivationModeName(spec.activations) +
                          (launch_flags & MXVAL_LAUNCH_PDL ? " pdl" : "");
  Tally& t = Summary()[key];
  ++t.cases;
  const bool pass = r->accuracy.verdict == reference::Verdict::kPass;
  t.passed += pass;
  const auto& s = spec.shape;
  EXPECT_TRUE(pass) << key << " B=" << s.B << " M=" << s.M << " N=" << s.N << " K=" << s.K << " "
                    << OutputLayoutName(spec.layout) << (spec.strided_x ? " strided" : "") << ": "
                    << r->accuracy.reason;
}

// The K a16wfp4_decode config is compiled for: every K without k-split
// warps (num_warps = BLOCK_SIZE_N / 8); with KW of them K in {256, 512}
// where K / KW is a multiple of 64.
bool DecodeCompiledFor(const TileConfig& c, int64_t K) {
  const int kw = c.num_warps / (c.block_n / 8);
  return kw == 1 || (K >= 256 && K % (64 * kw) == 0);
}

// Two guard groups per scale row (K/32 + 2 bytes) instead of the default,
// which keeps the dense rows' alignment: the register-sourced kernel then
// reads the scales byte by byte (K = 192: its 2-byte loads) instead of in
// the 4- to 16-byte loads dense rows get. Tests use both.
constexpr int64_t kUnalignedScaleGuard = 2;

// Arguments for can_implement checks only (never launched): B = 1, unit-stride
// x rows, packed rows of K/2 bytes, head-major y; pointers at a 16-byte
// aligned dummy.
mxval_gemm_args ShapeOnlyArgs(int64_t M, int64_t N, int64_t K) {
  alignas(16) static uint16_t dummy[8];
  mxval_gemm_args a{};
  a.B = 1, a.M = M, a.N = N, a.K = K, a.x_stride_k = 1, a.x_stride_m = K, a.w_packed_stride_n = K / 2;
  a.y_stride_m = N;
  a.x = a.y = dummy;
  a.w_packed = a.w_scales = reinterpret_cast<const uint8_t*>(dummy);
  return a;
}

// Whether a16wfp4_wgmma's shared memory (weight panel for all of K plus
// the x ring) fits this config at this K; any other refusal fails the test.
bool WgmmaFits(const mxval_kernel* k, const TileConfig& c, int64_t K) {
  const absl::Status st = CanImplement(*k, ShapeOnlyArgs(256, 512, K), c);
  if (st.ok()) return true;
  EXPECT_NE(st.message().find("shared memory"), std::string::npos) << st;
  return false;
}

// Whether a16wfp4_wgmma_rs's config is compiled for this K (it holds all
// of K in registers); any other refusal fails the test.
bool RsCompiledFor(const mxval_kernel* k, const TileConfig& c, int64_t K) {
  const absl::Status st = CanImplement(*k, ShapeOnlyArgs(256, 512, K), c);
  if (st.ok()) return true;
  EXPECT_NE(st.message().find("compiled for K in"), std::string::npos) << st;
  return false;
}

// The K values in `ks` this a16wfp4_wgmma_rs config is compiled for.
std::vector<int64_t> RsKs(const mxval_kernel* k, const TileConfig& c, std::initializer_list<int64_t> ks) {
  std::vector<int64_t> out;
  for (int64_t K : ks)
    if (RsCompiledFor(k, c, K)) out.push_back(K);
  return out;
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
    if (i % 2 == 0) spec.guard_groups = kUnalignedScaleGuard;
    auto [k, c] = combos[i % combos.size()];
    const bool decode = std::string(k->name) == "a16wfp4_decode";
    if (decode) {
      spec.shape.M = 1 + static_cast<int64_t>(rng() % (3 * c.block_m));  // up to three row tiles
      // With k-split warps it is compiled for K in {256, 512} (8 of them: 512): give it V-up.
      if (!DecodeCompiledFor(c, spec.shape.K)) spec.shape = {spec.shape.B, spec.shape.M, 256, 512};
    }
    const bool wgmma = std::string(k->name) == "a16wfp4_wgmma";
    // Deep-ring and 256-column configs hold K <= 256 only (refusal checked in WgmmaKernel...).
    if (wgmma && !WgmmaFits(k, c, spec.shape.K)) spec.shape = {spec.shape.B, spec.shape.M, 512, 192};
    const bool rs = std::string(k->name) == "a16wfp4_wgmma_rs";
    // Today every NUM_KSPLIT = 1 config takes the four model K and the
    // split-K (cluster) configs K = 512 at least; a config held to fewer K
    // gets the first model (K, N) it is compiled for.
    if (rs && !RsCompiledFor(k, c, spec.shape.K)) {
      bool placed = false;
      for (const auto& q : kn) {
        if (!RsCompiledFor(k, c, q[0])) continue;
        spec.shape = {spec.shape.B, spec.shape.M, q[1], q[0]};
        placed = true;
        break;
      }
      ASSERT_TRUE(placed) << c.ToString() << " is compiled for none of the model K";
    }
    const int64_t ktiles = (p[0] + c.block_k - 1) / c.block_k;
    if (!decode && !wgmma && !rs && i % 9 == 4 && ktiles > 1) c.ksplit = 2 + static_cast<int>(rng() % std::min<int64_t>(ktiles - 1, 3));
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
        const TileConfig c = FromAbi(k->configs[i]);
        const bool decode = std::string(k->name) == "a16wfp4_decode";
        spec.shape = {16, decode ? c.block_m - 3 : 77, 512, 192};
        if (std::string(k->name) == "a16wfp4_wgmma_rs" && c.ksplit > 1) {  // K / NUM_KSPLIT is not a multiple of 64
          EXPECT_FALSE(RsCompiledFor(k, c, 192)) << c.ToString();
          continue;
        }
        // A register-sourced config held to other K (its registers) has no K = 192 case.
        if (std::string(k->name) == "a16wfp4_wgmma_rs" && !RsCompiledFor(k, c, 192)) continue;
        spec.strided_x = true;
        spec.activations = mode;
        if (decode && c.num_warps > c.block_n / 8) {  // k-split decode variants refuse K = 192, clearly
          auto d = CaseData::Build(spec);
          ASSERT_TRUE(d.ok());
          std::vector<uint16_t> y(d->y_elems);
          const mxval_gemm_args a = AbiArgsFor(*d, d->x_bf16.data(), d->packed.data(), d->scales.data(), y.data(),
                                               nullptr, 0, nullptr);
          const absl::Status st = CanImplement(*k, a, c);
          EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
          EXPECT_NE(st.message().find("k-split"), std::string::npos) << st;
          continue;
        }
        CheckCase(k, c, spec);
      }
}

// Scale bytes 0 / 1 / 253 / 254 (common/inputs.h, extreme-scales): the
// prmt tables do not cover them, so every kernel's rare exact dequant path
// runs (for a16wfp4_wgmma_rs its second pass, with rows of one warp taking
// it and others not). Generated scales near 2^0 never reach it.
TEST_F(GpuKernels, ExtremeScaleBytesEveryKernelAndConfig) {
  std::mt19937_64 rng(2026120201);
  int ran = 0;
  for (const mxval_kernel* k : Library()->kernels())
    for (int i = 0; i < k->num_configs; ++i)
      for (auto mode : {ActivationMode::kBf16, ActivationMode::kMxfp4Even}) {
        const TileConfig c = FromAbi(k->configs[i]);
        const std::string name = k->name;
        CaseSpec spec;
        spec.shape = {4, name == "a16wfp4_decode" ? c.block_m + 5 : 77 + 64 * (i % 3), 256, 512};
        if (name == "a16wfp4_wgmma" && !WgmmaFits(k, c, 512)) spec.shape = {4, 77, 512, 192};
        if (name == "a16wfp4_wgmma_rs" && !RsCompiledFor(k, c, 512)) {
          // A config held to smaller K (registers): its largest compiled K.
          const std::vector<int64_t> ks = RsKs(k, c, {256, 192, 128});
          ASSERT_FALSE(ks.empty()) << c.ToString() << " is compiled for no K";
          spec.shape.K = ks.front();
        }
        spec.strided_x = i % 2 == 0;
        spec.layout = (i / 2) % 2 ? OutputLayout::kBatchMajor : OutputLayout::kHeadMajor;
        spec.activations = mode;
        spec.w_gen = *ParseGenerator("extreme-scales");
        spec.seed = rng();
        if (mode == ActivationMode::kMxfp4Even) spec.guard_groups = kUnalignedScaleGuard;
        SCOPED_TRACE(testing::Message() << name << " " << c.ToString() << " M=" << spec.shape.M);
        CheckCase(k, c, spec);
        ++ran;
      }
  EXPECT_GE(ran, 80);
}

TEST_F(GpuKernels, DeterministicBitForBit) {
  auto k = Library()->Find("a16wfp4_tc");
  ASSERT_TRUE(k.ok());
  CaseSpec spec;
  spec.shape = {16, 300, 256, 512};
  auto d = CaseData::Build(spec);
  ASSERT_TRUE(d.ok());
  const TileConfig c = FromAbi((*k)->configs[5]);
  auto mirror = DeviceCase::Upload(*Cuda(), *d);
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  std::vector<uint16_t> y1(d->y_elems, 1), y2(d->y_elems, 2);
  ASSERT_TRUE((*mirror)->Kernel(*k, c)(*d, y1.data()).ok());
  ASSERT_TRUE((*mirror)->Kernel(*k, c)(*d, y2.data()).ok());
  EXPECT_EQ(y1, y2);
  // Split-K over a cluster: rank 0 adds the partial tiles in rank order.
  auto rs = Library()->Find("a16wfp4_wgmma_rs");
  ASSERT_TRUE(rs.ok());
  int split = 0;
  for (int i = 0; i < (*rs)->num_configs; ++i) {
    const TileConfig cs = FromAbi((*rs)->configs[i]);
    if (cs.ksplit == 1) continue;
    std::vector<uint16_t> z1(d->y_elems, 1), z2(d->y_elems, 2);
    ASSERT_TRUE((*mirror)->Kernel(*rs, cs)(*d, z1.data()).ok()) << cs.ToString();
    ASSERT_TRUE((*mirror)->Kernel(*rs, cs)(*d, z2.data()).ok()) << cs.ToString();
    EXPECT_EQ(z1, z2) << cs.ToString();
    ++split;
  }
  EXPECT_EQ(split, 3);
}

// The C++ timing harness on the device: graph capture of the kernel's
// launches works through the ABI, buffers rotate, statistics are ordered.
TEST_F(GpuKernels, TimingHarnessCapturesGraphsAndRotatesBuffers) {
  auto k = Library()->Find("a16wfp4_tc");
  ASSERT_TRUE(k.ok());
  for (int64_t M : {1, 256, 4096}) {
    CaseSpec spec;
    spec.shape = {16, M, 512, 192};
    spec.strided_x = true;
    auto d = CaseData::Build(spec);
    ASSERT_TRUE(d.ok());
    auto mirror = DeviceCase::Upload(*Cuda(), *d);
    ASSERT_TRUE(mirror.ok()) << mirror.status();
    const TileConfig c = FromAbi((*k)->configs[0]);
    for (bool graph : {true, false}) {
      TimingOptions o;
      o.use_graph = graph;
      auto t = (*mirror)->Time(*k, c, o);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->graph, graph);
      EXPECT_GT(t->buffer_sets, 1);
      EXPECT_GT(t->median_s, 0);
      EXPECT_LE(t->p10_s, t->median_s);
      EXPECT_LE(t->median_s, t->p90_s);
      printf("timing M=%-5lld %-5s sets=%-2d launches/sample=%-2d median %.2f us (p10 %.2f, p90 %.2f)\n",
             static_cast<long long>(M), graph ? "graph" : "eager", t->buffer_sets, t->launches_per_sample,
             t->median_s * 1e6, t->p10_s * 1e6, t->p90_s * 1e6);
    }
    // A baseline and a candidate timed together (the worker's path): both
    // graphs captured on the shared buffer sets, every sample on both sides.
    auto rs = Library()->Find("a16wfp4_wgmma_rs");
    ASSERT_TRUE(rs.ok());
    const TileConfig rc{.block_m = 128, .block_n = 64, .block_k = 64, .ksplit = 1, .num_stages = 8, .num_warps = 5};
    TimingOptions o;
    o.samples = 6;
    auto both = (*mirror)->TimeInterleaved({{*k, c, 0}, {*rs, rc, 0}}, o);
    ASSERT_TRUE(both.ok()) << both.status();
    ASSERT_EQ(both->size(), 2u);
    for (const DeviceTiming& t : *both) {
      EXPECT_TRUE(t.graph);
      EXPECT_GT(t.buffer_sets, 1);
      EXPECT_EQ(t.per_launch_seconds.size(), 6u);
      EXPECT_GT(t.median_s, 0);
    }
    printf("interleaved M=%-5lld a16wfp4_tc %.2f us, a16wfp4_wgmma_rs %.2f us\n", static_cast<long long>(M),
           (*both)[0].median_s * 1e6, (*both)[1].median_s * 1e6);
    // Still correct after the timed launches (the mirrors were not disturbed).
    auto r = CheckKernel(*d, (*mirror)->Kernel(*k, c), CheckOptions{});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->accuracy.verdict, reference::Verdict::kPass) << r->accuracy.reason;
  }
}

// The worker's clock reader on the device: NVML finds the CUDA device by its
// PCI bus id, a timing window carries at least its first and last read, and
// the clock is a plausible SM clock. Prints each window (the large-M one
// may run into the board's power cap; that is reported, not asserted).
TEST_F(GpuKernels, TimingRecordsTheSmClockThroughNvml) {
  auto devs = Cuda()->Devices();
  ASSERT_TRUE(devs.ok());
  ASSERT_FALSE(devs->front().pci_bus_id.empty());
  auto clocks = OpenNvmlClocks(devs->front().pci_bus_id);
  ASSERT_TRUE(clocks.ok()) << clocks.status();
  auto now = (*clocks)->Read();
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_GT(now->sm_mhz, 100);
  EXPECT_LT(now->sm_mhz, 4000);
  EXPECT_GT((*clocks)->power_limit_mw(), 0);
  auto rs = Library()->Find("a16wfp4_wgmma_rs");
  ASSERT_TRUE(rs.ok());
  const TileConfig rc{.block_m = 128, .block_n = 64, .block_k = 64, .ksplit = 1, .num_stages = 8, .num_warps = 5};
  for (int64_t M : {64, 16384}) {
    CaseSpec spec;
    spec.shape = {16, M, 512, 128};
    spec.strided_x = true;
    auto d = CaseData::Build(spec);
    ASSERT_TRUE(d.ok());
    auto mirror = DeviceCase::Upload(*Cuda(), *d);
    ASSERT_TRUE(mirror.ok()) << mirror.status();
    TimingOptions o;
    o.clocks = clocks->get();
    auto both = (*mirror)->TimeInterleaved({{*rs, rc, 0}, {*rs, rc, 0}}, o);
    ASSERT_TRUE(both.ok()) << both.status();
    for (const DeviceTiming& t : *both) {
      EXPECT_EQ(t.clock.source, "nvml");
      EXPECT_GE(t.clock.samples, 2);
      EXPECT_GT(t.clock.sm_mhz_min, 100);
      EXPECT_LE(t.clock.sm_mhz_min, t.clock.sm_mhz_median);
      EXPECT_LE(t.clock.sm_mhz_median, t.clock.sm_mhz_max);
      EXPECT_LT(t.clock.sm_mhz_max, 4000);
      EXPECT_GT(t.clock.power_w_max, 0);
    }
    const ClockSummary& c = (*both)[0].clock;
    printf("clock M=%-5lld %.2f / %.2f us: %s, %d reads, settle %.3f s%s, peak %.0f W\n", static_cast<long long>(M),
           (*both)[0].median_s * 1e6, (*both)[1].median_s * 1e6, ClockText(c).c_str(), c.samples, c.settle_s,
           c.settled ? "" : " (gave up)", c.power_w_max);
  }
}

// The decode kernel against the per-tile kernel, bit for bit where both
// accumulate the same products: not required (different k order), so
// compare each with the reference on every decode bucket, both layouts,
// every supported K, and the guards (scales past K/32 are 0xFF).
TEST_F(GpuKernels, DecodeKernelEveryKAndBucket) {
  auto k = Library()->Find("a16wfp4_decode");
  ASSERT_TRUE(k.ok());
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int ci = 0; ci < (*k)->num_configs; ++ci) {
    const TileConfig c = FromAbi((*k)->configs[ci]);
    for (int64_t K : {128, 192, 256, 512})
      for (int64_t M : {int64_t{1}, int64_t{c.block_m / 2 + 1}, int64_t{c.block_m}, int64_t{2 * c.block_m + 3}}) {
        if (!DecodeCompiledFor(c, K)) {  // refused, with the reason
          const absl::Status st = CanImplement(**k, ShapeOnlyArgs(M, 256, K), c);
          EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.ToString() << " K=" << K;
          EXPECT_NE(st.message().find("k-split warps"), std::string::npos) << st;
          continue;
        }
        ++checked;
        CaseSpec spec;
        spec.shape = {16, M, K == 512 ? 256 : 512, K};
        spec.layout = (M + K) % 2 ? OutputLayout::kBatchMajor : OutputLayout::kHeadMajor;
        spec.strided_x = K != 512;
        spec.activations = (ci + M) % 3 == 0 ? ActivationMode::kMxfp4Even : ActivationMode::kBf16;
        spec.x_gen = *ParseGenerator(M % 2 ? "heavy-tail" : "normal");
        spec.seed = rng();
        SCOPED_TRACE(testing::Message() << c.ToString() << " K=" << K << " M=" << M);
        CheckCase(*k, c, spec);
      }
  }
  // (config, K) pairs: 6 configs without k-split warps x 4 K, 12 with 2 or 4
  // of them x 2 K, 6 with 8 of them x K = 512; four M each.
  EXPECT_EQ(checked, 4 * (6 * 4 + 12 * 2 + 6 * 1));
  // Refusals: too many row tiles for the grid, an uncompiled K, split-K.
  mxval_gemm_args a = ShapeOnlyArgs(65535LL * 64 + 1, 64, 192);
  TileConfig c64;
  for (int i = 0; i < (*k)->num_configs; ++i) {
    const TileConfig c = FromAbi((*k)->configs[i]);
    if (c.block_m == 64 && c.num_warps == c.block_n / 8) c64 = c;  // no k-split warps: every K compiled
  }
  ASSERT_EQ(c64.block_m, 64);
  const absl::Status tiles = CanImplement(**k, a, c64);
  EXPECT_EQ(tiles.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tiles.message().find("grid limit"), std::string::npos) << tiles;
  a.M = 8;
  EXPECT_TRUE(CanImplement(**k, a, c64).ok());
  a.K = 160;
  EXPECT_FALSE(CanImplement(**k, a, c64).ok());
  a.K = 192;
  TileConfig split = c64;
  split.ksplit = 2;
  EXPECT_FALSE(CanImplement(**k, a, split).ok());
}

// The Hopper kernel: every config and mode over shapes where each CTA walks
// several M tiles (the cp.async ring and the wgmma groups cross tile
// boundaries), ragged last tiles, every K it takes, both layouts; then its
// refusals, each naming what is wrong.
TEST_F(GpuKernels, WgmmaKernelEveryConfigAcrossTiles) {
  auto k = Library()->Find("a16wfp4_wgmma");
  ASSERT_TRUE(k.ok()) << k.status();
  std::mt19937_64 rng(90);
  for (int ci = 0; ci < (*k)->num_configs; ++ci) {
    const TileConfig c = FromAbi((*k)->configs[ci]);
    for (auto [K, N] : {std::pair<int64_t, int64_t>{192, 512}, {128, 512}, {512, 256}, {512, 128}})
      for (int64_t M : {int64_t{1}, int64_t{c.block_m + 1}, int64_t{4099}, int64_t{16384}}) {
        if (!WgmmaFits(*k, c, K)) continue;  // panel + ring over the shared memory: refusal checked below
        if (M == 16384 && K != 192) continue;       // one full-size shape per config (the CPU reference is slow)
        CaseSpec spec;
        spec.shape = {M >= 4096 ? int64_t{16} : int64_t{3}, M, N, K};
        spec.layout = (M + K + ci) % 2 ? OutputLayout::kBatchMajor : OutputLayout::kHeadMajor;
        spec.strided_x = (M + ci) % 3 != 0;
        spec.activations = (ci + M) % 2 ? ActivationMode::kMxfp4Even : ActivationMode::kBf16;
        spec.x_gen = *ParseGenerator(M % 3 == 0 ? "heavy-tail" : "normal");
        spec.w_gen = *ParseGenerator(M % 2 ? "uniform-codes" : "normal");
        spec.seed = rng();
        SCOPED_TRACE(testing::Message() << c.ToString() << " K=" << K << " M=" << M);
        CheckCase(*k, c, spec);
      }
  }
  const mxval_gemm_args a = ShapeOnlyArgs(4096, 512, 192);
  TileConfig c128, c256;
  for (int i = 0; i < (*k)->num_configs; ++i) {
    const TileConfig c = FromAbi((*k)->configs[i]);
    if (c.block_n == 128) c128 = c;
    if (c.block_n == 256) c256 = c;
  }
  ASSERT_EQ(c128.block_n, 128);
  ASSERT_EQ(c256.block_n, 256);
  EXPECT_TRUE(CanImplement(**k, a, c128).ok());
  auto refused = [&](const mxval_gemm_args& args, const TileConfig& c, const char* what) {
    const absl::Status st = CanImplement(**k, args, c);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
  };
  mxval_gemm_args b = a;
  b.K = 160, b.w_packed_stride_n = 80;
  refused(b, c128, "multiple of 64");
  TileConfig split = c128;
  split.ksplit = 2;
  refused(a, split, "NUM_KSPLIT=1");
  b = a;
  b.K = 512, b.w_packed_stride_n = 256;
  refused(b, c256, "shared memory");
  b = a;
  b.x_stride_k = 2;
  refused(b, c128, "unit-stride");
  b = a;
  b.y_stride_m = 516;
  refused(b, c128, "multiples of 8");
}

// The register-sourced Hopper kernel: every config at every K it is
// compiled for, with CTAs that walk several M tiles (B = 16: one CTA per
// (batch, 32, 64 or 128 weight rows), so the ring and the wgmma groups cross
// tiles), ragged M and N (weight rows past N, a last tile mostly past M),
// both layouts and modes, strided x; then its refusals, each naming what is
// wrong.
TEST_F(GpuKernels, WgmmaRsKernelEveryConfigAndK) {
  auto k = Library()->Find("a16wfp4_wgmma_rs");
  ASSERT_TRUE(k.ok()) << k.status();
  std::mt19937_64 rng(92);
  int ran = 0, compiled = 0;
  for (int ci = 0; ci < (*k)->num_configs; ++ci) {
    const TileConfig c = FromAbi((*k)->configs[ci]);
    const std::vector<int64_t> ks = RsKs(*k, c, {128, 192, 256, 512});
    EXPECT_FALSE(ks.empty()) << c.ToString() << " is compiled for no K";
    compiled += static_cast<int>(ks.size());
    for (int64_t K : ks) {
      for (auto [B, M, N] : {std::tuple<int64_t, int64_t, int64_t>{16, 5 * c.block_m + 3, 512}, {3, 1, 200},
                             {2, c.block_m + 1, 72}, {16, 1000, K == 512 ? 128 : 328}}) {
        CaseSpec spec;
        spec.shape = {B, M, N, K};
        // Scale rows as aligned as dense ones (vector loads) in the first
        // and third case, K/32 + 2 bytes in the others.
        if (N != 512 && N != 72) spec.guard_groups = kUnalignedScaleGuard;
        spec.layout = (M + N + ci) % 2 ? OutputLayout::kBatchMajor : OutputLayout::kHeadMajor;
        spec.strided_x = (M + ci) % 3 != 0;
        spec.activations = (ci + M + K / 64) % 2 ? ActivationMode::kMxfp4Even : ActivationMode::kBf16;
        spec.x_gen = *ParseGenerator(M % 3 == 0 ? "heavy-tail" : "normal");
        spec.w_gen = *ParseGenerator((M + K / 64) % 2 ? "uniform-codes" : "normal");
        spec.seed = rng();
        SCOPED_TRACE(testing::Message() << c.ToString() << " K=" << K << " B=" << B << " M=" << M << " N=" << N);
        CheckCase(*k, c, spec);
        ++ran;
      }
    }
  }
  // Four cases for every (config, K) compiled, counted from the library's
  // own refusals so that a config held to fewer K (registers) needs no edit
  // here. Today: 5 configs (three of 64 or 128 weight rows, two of 32) x K
  // in {128, 192, 256, 512}, and the split-K configs: two ranks x 64 rows at
  // K in {128, 256, 512}, four ranks at 512, two ranks x 128 rows at
  // {256, 512}; fewer than those 26 means a config lost a K.
  EXPECT_EQ(ran, 4 * compiled);
  EXPECT_GE(compiled, 5 * 4 + 3 + 1 + 2);
  TileConfig two_wg;  // two consumer warpgroups
  for (int i = 0; i < (*k)->num_configs; ++i) {
    const TileConfig c = FromAbi((*k)->configs[i]);
    if (c.block_n == 128) two_wg = c;
  }
  ASSERT_EQ(two_wg.block_n, 128);
  const mxval_gemm_args a = ShapeOnlyArgs(4096, 512, 192);
  EXPECT_TRUE(CanImplement(**k, a, two_wg).ok());
  auto refused = [&](const mxval_gemm_args& args, const TileConfig& c, const char* what) {
    const absl::Status st = CanImplement(**k, args, c);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
  };
  mxval_gemm_args b = a;
  b.K = 320, b.w_packed_stride_n = 160;
  refused(b, two_wg, "compiled for K in {128, 192, 256, 512}, not K = 320");
  b.K = 1024, b.w_packed_stride_n = 512;
  refused(b, two_wg, "not K = 1024");
  TileConfig split = two_wg;
  split.ksplit = 2;
  refused(a, split, "with NUM_KSPLIT in {1}, not NUM_KSPLIT=2");
  TileConfig split64;  // 64 rows, 8 stages: compiled with 2 ranks
  for (int i = 0; i < (*k)->num_configs; ++i) {
    const TileConfig c = FromAbi((*k)->configs[i]);
    if (c.block_m == 64 && c.ksplit == 2) split64 = c;
  }
  ASSERT_EQ(split64.ksplit, 2);
  split64.ksplit = 3;
  refused(a, split64, "with NUM_KSPLIT in {2}, not NUM_KSPLIT=3");
  split64.ksplit = 2;
  refused(a, split64, "compiled for K in {128, 256, 512}, not K = 192");
  TileConfig unknown = two_wg;
  unknown.num_stages = 7;
  refused(a, unknown, "not compiled into a16wfp4_wgmma_rs");
  b = a;
  b.x_stride_k = 2;
  refused(b, two_wg, "unit-stride");
  b = a;
  b.y_stride_m = 516;
  refused(b, two_wg, "multiples of 8");
}

// The roofline the worker measures per task (validation/roofline.h): the
// stream-ordered copy really copies, and the copy bandwidth and the bf16 GEMM
// rate through cuBLAS are a GPU's, not a failed or skipped call's (a GEMM
// that never ran would time at next to nothing and read as a rate far above
// any GPU's). On the H200, bench/gpu_bench.py measures about 4.1-4.2 TB/s
// and 760-790 TFLOP/s the same way.
TEST_F(GpuKernels, RooflineMeasuredOnTheDevice) {
  DeviceRuntime& rt = *Cuda();
  std::vector<uint8_t> src(1 << 20), back(1 << 20, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13 + 5);
  auto a = DeviceBuffer::Allocate(rt, src.size());
  auto b = DeviceBuffer::Allocate(rt, src.size());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(rt.CopyToDevice(a->get(), src.data(), src.size()).ok());
  ASSERT_TRUE(rt.CopyOnDeviceAsync(b->get(), a->get(), src.size()).ok());
  ASSERT_TRUE(rt.Synchronize().ok());
  ASSERT_TRUE(rt.CopyToHost(back.data(), b->get(), back.size()).ok());
  EXPECT_EQ(back, src);
  const Roofline r = MeasureRoofline(rt);
  std::printf("roofline: copy %.3f TB/s, bf16 GEMM %.1f TFLOP/s (%s)\n", r.copy_bytes_per_s * 1e-12,
              r.bf16_flops_per_s * 1e-12, r.note.c_str());
  EXPECT_GT(r.copy_bytes_per_s, 0.2e12) << r.note;
  EXPECT_LT(r.copy_bytes_per_s, 20e12) << r.note;
  if (r.note.find("cuBLAS not found") != std::string::npos) {
    GTEST_SKIP() << "no cuBLAS on this machine: " << r.note;
  }
  EXPECT_GT(r.bf16_flops_per_s, 50e12) << r.note;
  EXPECT_LT(r.bf16_flops_per_s, 5000e12) << r.note;
}

// The late writer really lets the next kernel start early: a second writer
// launched with PDL starts (global timer) before the first one, which spins
// 200 us, has finished; launched plain, it starts after. Without this the
// PDL checks below could pass vacuously.
TEST_F(GpuKernels, LateWriterLetsThePdlKernelAfterItStartEarly) {
  DeviceRuntime& rt = *Cuda();
  auto stamps = DeviceBuffer::Allocate(rt, 4 * sizeof(uint64_t));
  ASSERT_TRUE(stamps.ok());
  for (bool pdl : {true, false}) {
    ASSERT_TRUE(rt.Memset(stamps->get(), 0, 4 * sizeof(uint64_t)).ok());
    LateWrite first, second;
    first.delay_ns = 200000;
    first.stamps = stamps->get();
    second.delay_ns = 0;
    second.stamps = static_cast<uint64_t*>(stamps->get()) + 2;
    second.pdl = pdl;
    ASSERT_TRUE(rt.LaunchLateWriter(first).ok());
    ASSERT_TRUE(rt.LaunchLateWriter(second).ok());
    ASSERT_TRUE(rt.Synchronize().ok());
    uint64_t t[4];
    ASSERT_TRUE(rt.CopyToHost(t, stamps->get(), sizeof(t)).ok());
    ASSERT_GT(t[1], t[0]);
    EXPECT_GE(t[1] - t[0], 200000u);
    if (pdl) {
      EXPECT_LT(t[2], t[1]) << "the PDL launch did not start before the writer ahead of it finished";
    } else {
      EXPECT_GE(t[2], t[1]) << "a plain launch started before the kernel ahead of it finished";
    }
  }
}

// Every kernel that acts on MXVAL_LAUNCH_PDL, every config, launched with it
// right behind the late writer (x poisoned until 20 us after the kernel may
// start, y poisoned again then): reading x or writing y before
// griddepcontrol.wait fails these.
TEST_F(GpuKernels, PdlLaunchesWaitForTheKernelBeforeThem) {
  std::mt19937_64 rng(314);
  int ran = 0;
  for (const mxval_kernel* k : Library()->kernels()) {
    if (!(k->launch_flags & MXVAL_LAUNCH_PDL)) continue;
    for (int ci = 0; ci < k->num_configs; ++ci) {
      const TileConfig c = FromAbi(k->configs[ci]);
      for (int64_t K : {192, 512}) {
        const std::string name = k->name;
        if (name == "a16wfp4_decode" && !DecodeCompiledFor(c, K)) continue;
        if (!CanImplement(*k, ShapeOnlyArgs(256, 512, K), c).ok()) continue;
        for (int64_t M : {int64_t{1} + ci % 7, int64_t{2} * c.block_m + 5}) {
          CaseSpec spec;
          spec.shape = {4, M, K == 512 ? 256 : 512, K};
          spec.layout = (M + ci) % 2 ? OutputLayout::kBatchMajor : OutputLayout::kHeadMajor;
          spec.strided_x = (ci % 2) == 0;
          spec.activations = (ci + K / 64) % 2 ? ActivationMode::kMxfp4Even : ActivationMode::kBf16;
          spec.x_gen = *ParseGenerator("normal");
          spec.w_gen = *ParseGenerator("normal");
          spec.seed = rng();
          SCOPED_TRACE(testing::Message() << name << " " << c.ToString() << " K=" << K << " M=" << M << " PDL");
          CheckCase(k, c, spec, MXVAL_LAUNCH_PDL);
          ++ran;
        }
      }
    }
  }
  EXPECT_GE(ran, 40);
}

// The check above must be able to fail on a real GPU. The canary library
// (tests/plugins/pdl_canary_plugin.cu, staged next to the kernel library)
// has two naive kernels that act on MXVAL_LAUNCH_PDL: one waits for the
// kernel before it before reading x, one never waits. Launched with PDL
// behind the late writer, the first passes and the second fails; launched
// plain, both pass (so the failure is the launch's, not the arithmetic's).
TEST_F(GpuKernels, PdlCheckCatchesAKernelThatDoesNotWait) {
  std::string path = LibraryPath();
  path = path.substr(0, path.rfind('/') + 1) + "libpdl_canary_plugin.so";
  if (const char* env = std::getenv("MXVAL_PDL_CANARY_LIBRARY")) path = env;
  auto lib = KernelLibrary::Open(path);
  ASSERT_TRUE(lib.ok()) << lib.status();
  const TileConfig c{.block_m = 1, .block_n = 128, .block_k = 32, .ksplit = 1, .num_stages = 1, .num_warps = 4};
  std::mt19937_64 rng(2718);
  for (const int64_t M : {1, 7, 33}) {
    CaseSpec spec;
    spec.shape = {4, M, 256, 512};
    spec.layout = M % 2 ? OutputLayout::kBatchMajor : OutputLayout::kHeadMajor;
    spec.strided_x = M == 7;
    spec.x_gen = *ParseGenerator("normal");
    spec.w_gen = *ParseGenerator("normal");
    spec.seed = rng();
    auto d = CaseData::Build(spec, int64_t{1} << 30);
    ASSERT_TRUE(d.ok()) << d.status();
    for (const char* name : {"pdl_canary_waits", "pdl_canary_nowait"}) {
      auto k = (*lib)->Find(name);
      ASSERT_TRUE(k.ok()) << k.status();
      ASSERT_EQ((*k)->launch_flags, uint32_t{MXVAL_LAUNCH_PDL});
      for (const uint32_t flags : {0u, uint32_t{MXVAL_LAUNCH_PDL}}) {
        SCOPED_TRACE(testing::Message() << name << " M=" << M << (flags ? " PDL" : " plain"));
        auto r = CheckOnDevice(*d, *k, c, CheckOptions{}, flags);
        ASSERT_TRUE(r.ok()) << r.status();
        const bool should_fail = flags != 0 && std::string(name) == "pdl_canary_nowait";
        if (should_fail) {
          EXPECT_NE(r->accuracy.verdict, reference::Verdict::kPass) << "the PDL check passed a kernel that never waits";
          EXPECT_GT(r->accuracy.nan_count + r->accuracy.unwritten_count, 0) << r->accuracy.reason;
        } else {
          EXPECT_EQ(r->accuracy.verdict, reference::Verdict::kPass) << r->accuracy.reason;
        }
      }
    }
  }
}

// The TMA-fed configs (num_warps = 9) end tiles with TMA stores of 64 x 64
// boxes by default, and with st.global from registers under
// MXVAL_WGMMA_STORE=direct: both, on N that is not a multiple of 64 or of
// BLOCK_SIZE_N (the copy engine clips the last box's columns), ragged M
// (clipped rows, and a 128-row tile whose second half is past M), both
// output layouts.
TEST_F(GpuKernels, WgmmaTmaEpiloguesClipAtTheEdges) {
  auto k = Library()->Find("a16wfp4_wgmma");
  ASSERT_TRUE(k.ok()) << k.status();
  std::mt19937_64 rng(91);
  int ran = 0;
  for (const char* store : {"tma", "direct"}) {
    ASSERT_EQ(setenv("MXVAL_WGMMA_STORE", store, 1), 0);
    for (int ci = 0; ci < (*k)->num_configs; ++ci) {
      const TileConfig c = FromAbi((*k)->configs[ci]);
      if (c.num_warps != 9) continue;
      for (auto [K, N, M] : {std::tuple<int64_t, int64_t, int64_t>{128, 200, 3 * c.block_m + 5}, {192, 72, 60},
                             {128, 328, 2 * c.block_m + 70}}) {
        if (!WgmmaFits(*k, c, K)) continue;
        CaseSpec spec;
        spec.shape = {3, M, N, K};
        spec.layout = N % 3 == 2 ? OutputLayout::kBatchMajor : OutputLayout::kHeadMajor;
        spec.strided_x = N != 72;
        spec.activations = (ci + N) % 2 ? ActivationMode::kMxfp4Even : ActivationMode::kBf16;
        spec.seed = rng();
        SCOPED_TRACE(testing::Message() << c.ToString() << " store=" << store << " N=" << N << " M=" << M);
        CheckCase(*k, c, spec);
        ++ran;
      }
    }
  }
  unsetenv("MXVAL_WGMMA_STORE");
  EXPECT_GE(ran, 20);
}

// The prmt-table dequantization of the wgmma panel and the decode kernel,
// run by the device's own byte permutes, for every scale byte (the exact
// fallback's subnormal, overflowing and NaN ones too) and every byte: bit
// for bit against the format library (the kernels' end-to-end tests only
// see scales near 2^0).
// The register-sourced and decode kernels' conversion (bit placement, then
// mul.rn.bf16x2 by 2^(S - 1)) likewise, mode 1: code 0.5 is placed
// as a bf16 subnormal and the products at scale bytes 0..6 are subnormal, so
// a device that flushed bf16 subnormals would fail here.
TEST_F(GpuKernels, PrmtDequantExactOnTheDevice) {
  void* h = dlopen(LibraryPath().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  using SelfTest = int32_t (*)(int32_t, uint32_t*, char*, size_t);
  auto fn = reinterpret_cast<SelfTest>(dlsym(h, "mxval_dequant_selftest_mode"));
  ASSERT_NE(fn, nullptr) << "the library does not export mxval_dequant_selftest_mode";
  for (int32_t mode = 0; mode < 2; ++mode) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    std::vector<uint32_t> words(256 * 256 * 4, 0xFFFFFFFFu);  // poisoned: unwritten words fail
    char err[256] = {};
    ASSERT_EQ(fn(mode, words.data(), err, sizeof(err)), 0) << err;
    EXPECT_EQ(gpu::CheckDequantSelfTestWords(words.data()), "");
  }
  char err[256] = {};
  std::vector<uint32_t> words(256 * 256 * 4);
  EXPECT_NE(fn(2, words.data(), err, sizeof(err)), 0);  // no such mode: an error, not a launch
  dlclose(h);
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
