// The device-buffer adapter and the timing harness, on the host runtime with
// the CPU kernel library (the same code runs on CUDA in gpu_kernel_test).
#include "validation/device_case.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernel_library.h"
#include "kernels/runtime/scripted_clocks.h"
#include "validation/abi_kernel.h"

namespace mxval {
namespace {

const mxval_kernel* CpuKernel() { return &cpu::CpuKernelLibrary()->kernels[0]; }

const TileConfig kConfig{.block_m = 12, .block_n = 64, .block_k = 64, .ksplit = 1, .num_stages = 2, .num_warps = 4};

CaseData MakeCase(uint64_t seed = 7) {
  CaseSpec spec;
  spec.shape = {3, 37, 128, 192};
  spec.strided_x = true;
  spec.x_gen = *ParseGenerator("normal");
  spec.w_gen = *ParseGenerator("normal");
  spec.seed = seed;
  auto d = CaseData::Build(spec);
  EXPECT_TRUE(d.ok()) << d.status();
  return std::move(*d);
}

TEST(DeviceCase, MatchesTheHostPathBitForBit) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok()) << dc.status();
  CheckOptions opt;
  auto dev = CheckKernel(d, (*dc)->Kernel(CpuKernel(), kConfig), opt);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(dev->accuracy.verdict, reference::Verdict::kPass) << dev->accuracy.reason;
  std::vector<uint16_t> y1(d.y_elems, 1), y2(d.y_elems, 2);
  ASSERT_TRUE((*dc)->Kernel(CpuKernel(), kConfig)(d, y1.data()).ok());
  ASSERT_TRUE(HostAbiKernel(CpuKernel(), kConfig)(d, y2.data()).ok());
  EXPECT_EQ(y1, y2);
}

// Kernels with injected bugs, reached through the ABI like a plugin.
int32_t DropLastRow(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  mxval_gemm_args b = *a;
  b.M -= 1;
  return CpuKernel()->run(&b, c, err, len);
}
size_t SmallWorkspace(const mxval_gemm_args*, const mxval_tile_config*) { return 64; }
// Uses its workspace as if it were zeroed (it is not: undefined on entry).
int32_t TrustsWorkspace(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CpuKernel()->run(a, c, err, len)) return r;
  uint16_t bias;
  std::memcpy(&bias, a->workspace, 2);
  uint16_t* y = static_cast<uint16_t*>(a->y);
  y[0] = bias;  // 0xFFFF (NaN) once the harness poisons the workspace
  return 0;
}

// Writes one element past the end of y and one before it.
int32_t WritesOutsideY(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CpuKernel()->run(a, c, err, len)) return r;
  uint16_t* y = static_cast<uint16_t*>(a->y);
  const int64_t last = (a->B - 1) * a->y_stride_b + (a->M - 1) * a->y_stride_m + (a->N - 1);
  y[last + 1] = y[last];
  y[-1] = y[0];
  return 0;
}

mxval_kernel Variant(int32_t (*run)(const mxval_gemm_args*, const mxval_tile_config*, char*, size_t),
                     size_t (*ws)(const mxval_gemm_args*, const mxval_tile_config*) = nullptr) {
  mxval_kernel k = *CpuKernel();
  k.run = run;
  if (ws) k.workspace_size = ws;
  return k;
}

TEST(DeviceCase, UnwrittenRowsAreCaughtOnTheDevicePath) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  const mxval_kernel k = Variant(DropLastRow);
  auto r = CheckKernel(d, (*dc)->Kernel(&k, kConfig), CheckOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->accuracy.verdict, reference::Verdict::kFailUnwritten) << r->accuracy.reason;
}

TEST(DeviceCase, WorkspaceIsPoisonedBeforeEachRun) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  const mxval_kernel k = Variant(TrustsWorkspace, SmallWorkspace);
  auto r = CheckKernel(d, (*dc)->Kernel(&k, kConfig), CheckOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->accuracy.verdict, reference::Verdict::kPass);
  EXPECT_GE(r->accuracy.nan_count, 1);
}

TEST(DeviceCase, WritesOutsideYAreCaughtOnTheDevicePath) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  const mxval_kernel k = Variant(WritesOutsideY);
  auto r = CheckKernel(d, (*dc)->Kernel(&k, kConfig), CheckOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->accuracy.verdict, reference::Verdict::kFailOutOfBounds) << r->accuracy.reason;
  EXPECT_NE(r->accuracy.reason.find("1 bf16 element(s) in the guard before its first, 1 in the guard after"),
            std::string::npos)
      << r->accuracy.reason;
  // The same kernel on the host path: CheckKernel's own guards.
  auto h = CheckKernel(d, HostAbiKernel(&k, kConfig), CheckOptions{});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->accuracy.verdict, reference::Verdict::kFailOutOfBounds) << h->accuracy.reason;
  // A correct kernel leaves every guard alone on both paths.
  auto ok = CheckKernel(d, (*dc)->Kernel(CpuKernel(), kConfig), CheckOptions{});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->accuracy.verdict, reference::Verdict::kPass) << ok->accuracy.reason;
}

uint32_t g_seen_flags = 0xdead;
int32_t RecordsFlags(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  g_seen_flags = a->launch_flags;
  return CpuKernel()->run(a, c, err, len);
}

// A kernel that does not act on MXVAL_LAUNCH_PDL is launched plain: it gets
// no flag, no late writer runs, and it passes.
TEST(DeviceCase, PdlIsOnlyPassedToKernelsThatActOnIt) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  const mxval_kernel k = Variant(RecordsFlags);
  ASSERT_EQ(k.launch_flags, 0u);
  EXPECT_EQ(DeviceCase::EffectiveFlags(&k, MXVAL_LAUNCH_PDL), 0u);
  auto r = CheckKernel(d, (*dc)->Kernel(&k, kConfig, MXVAL_LAUNCH_PDL), CheckOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->accuracy.verdict, reference::Verdict::kPass) << r->accuracy.reason;
  EXPECT_EQ(g_seen_flags, 0u);
  TimingOptions o;
  o.samples = 1;
  o.launches_per_sample = 1;
  g_seen_flags = 0xdead;
  ASSERT_TRUE((*dc)->Time(&k, kConfig, o, MXVAL_LAUNCH_PDL).ok());
  EXPECT_EQ(g_seen_flags, 0u);
}

// A kernel that claims MXVAL_LAUNCH_PDL but reads x and writes y without
// waiting for the kernel before it. The host runtime runs the late writer's
// copies after the host kernel, which is exactly that kernel's behaviour on
// a GPU: it computes with the poisoned x and its y is poisoned again.
TEST(DeviceCase, PdlKernelThatDoesNotWaitIsCaught) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  mxval_kernel k = Variant(RecordsFlags);
  k.launch_flags = MXVAL_LAUNCH_PDL;
  g_seen_flags = 0;
  auto r = CheckKernel(d, (*dc)->Kernel(&k, kConfig, MXVAL_LAUNCH_PDL), CheckOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(g_seen_flags, uint32_t{MXVAL_LAUNCH_PDL});
  EXPECT_NE(r->accuracy.verdict, reference::Verdict::kPass);
  EXPECT_EQ(r->accuracy.unwritten_count + r->accuracy.nan_count, r->accuracy.checked) << r->accuracy.reason;
  // The writer restored x: the same kernel launched plain passes, on the same mirrors.
  auto plain = CheckKernel(d, (*dc)->Kernel(&k, kConfig, 0), CheckOptions{});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->accuracy.verdict, reference::Verdict::kPass) << plain->accuracy.reason;
  EXPECT_EQ(g_seen_flags, 0u);
}

TEST(DeviceCase, RejectsAnotherCase) {
  auto rt = NewHostRuntime();
  CaseData d = MakeCase(), other = MakeCase(8);
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  std::vector<uint16_t> y(other.y_elems);
  EXPECT_EQ((*dc)->Kernel(CpuKernel(), kConfig)(other, y.data()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DeviceCase, TimingRotatesBuffersAndReportsEverySample) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  const int64_t set_bytes = d.x_bf16.size() * 2 + d.packed.size() + d.scales.size() + d.y_elems * 2;
  TimingOptions o;
  o.samples = 5;
  o.launches_per_sample = 3;
  o.rotate_bytes = 3 * set_bytes;
  auto t = (*dc)->Time(CpuKernel(), kConfig, o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->buffer_sets, 3);
  EXPECT_EQ(t->launches_per_sample, 3);
  EXPECT_FALSE(t->graph);  // the host runtime cannot capture
  ASSERT_EQ(t->per_launch_seconds.size(), 5u);
  EXPECT_GT(t->median_s, 0);
  EXPECT_LE(t->p10_s, t->median_s);
  EXPECT_LE(t->median_s, t->p90_s);
  // The rotated copies are real copies: every set computes the same y.
  auto again = CheckKernel(d, (*dc)->Kernel(CpuKernel(), kConfig), CheckOptions{});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->accuracy.verdict, reference::Verdict::kPass);
}

std::string g_order;
int32_t RunA(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  g_order += 'A';
  return CpuKernel()->run(a, c, err, len);
}
int32_t RunB(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  g_order += 'B';
  return CpuKernel()->run(a, c, err, len);
}

// A baseline and a candidate timed together: each warms up on its own, then
// the samples alternate A B, B A, A B, B A, so neither side always runs right
// after the other (the order is checked, not the times).
TEST(DeviceCase, InterleavedTimingAlternatesTheSidesSampleBySample) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  const mxval_kernel a = Variant(RunA), b = Variant(RunB);
  TimingOptions o;
  o.warmup = 1;
  o.samples = 4;
  o.launches_per_sample = 2;
  o.rotate_bytes = 1;  // one buffer set
  g_order.clear();
  auto t = (*dc)->TimeInterleaved({{&a, kConfig, 0}, {&b, kConfig, 0}}, o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(g_order, "AB" "AABB" "BBAA" "AABB" "BBAA");
  ASSERT_EQ(t->size(), 2u);
  for (const DeviceTiming& side : *t) {
    EXPECT_EQ(side.per_launch_seconds.size(), 4u);
    EXPECT_EQ(side.launches_per_sample, 2);
    EXPECT_EQ(side.buffer_sets, 1);
    EXPECT_GT(side.median_s, 0);
  }
  // Time() is the one-side case of the same harness.
  g_order.clear();
  auto one = (*dc)->Time(&a, kConfig, o);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(g_order, "A" "AAAAAAAA");
  EXPECT_EQ(one->per_launch_seconds.size(), 4u);
}

// With a clock reader the samples wait for the board to come off its power
// cap (the settle reads all come before the first sample, none before the
// warm-up), and every side's timing carries the clock of the window.
ScriptedClocks* g_clocks = nullptr;
std::vector<int> g_reads_at_launch;
int32_t RunCounted(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  g_reads_at_launch.push_back(g_clocks->reads());
  return CpuKernel()->run(a, c, err, len);
}

TEST(DeviceCase, TimingSettlesThenRecordsTheClockOfItsSamples) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  // Two settle reads (capped, then calm), the window's first read, then the
  // cap again for every later read.
  ScriptedClocks clocks({{{1500, 0x4, 690000}}, {{1980, 0x1, 100000}}, {{1980, 0, 150000}}, {{1710, 0x4, 680000}}},
                        700000);
  g_clocks = &clocks;
  g_reads_at_launch.clear();
  const mxval_kernel k = Variant(RunCounted);
  TimingOptions o;
  o.warmup = 1;
  o.samples = 4;
  o.launches_per_sample = 2;
  o.rotate_bytes = 1;
  o.clocks = &clocks;
  o.clock_poll = absl::Microseconds(200);
  auto t = (*dc)->TimeInterleaved({{&k, kConfig, 0}, {&k, kConfig, 0}}, o);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(g_reads_at_launch.size(), 2u + 2 * 4 * 2);
  EXPECT_EQ(g_reads_at_launch[0], 0);  // warm-up, before any read
  EXPECT_EQ(g_reads_at_launch[1], 0);
  for (size_t i = 2; i < g_reads_at_launch.size(); ++i) EXPECT_GE(g_reads_at_launch[i], 3) << i;
  for (const DeviceTiming& side : *t) {
    EXPECT_EQ(side.clock.source, "scripted");
    EXPECT_GE(side.clock.samples, 2);
    EXPECT_EQ(side.clock.sm_mhz_min, 1710);
    EXPECT_EQ(side.clock.sm_mhz_max, 1980);
    EXPECT_EQ(side.clock.reasons, 0x4u);
    EXPECT_TRUE(side.clock.Disturbed());
    EXPECT_TRUE(side.clock.settled);
    EXPECT_GT(side.clock.settle_s, 0);  // one poll's wait at least
  }
  // Without a reader the timing says why it has no clock.
  o.clocks = nullptr;
  o.no_clock_note = "no reader here";
  auto plain = (*dc)->Time(CpuKernel(), kConfig, o);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->clock.samples, 0);
  EXPECT_EQ(plain->clock.note, "no reader here");
  g_clocks = nullptr;
}

TEST(DeviceCase, InterleavedTimingRefusesBadInput) {
  auto rt = NewHostRuntime();
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  EXPECT_EQ((*dc)->TimeInterleaved({}, TimingOptions{}).status().code(), absl::StatusCode::kInvalidArgument);
  TileConfig bad = kConfig;
  bad.block_k = 48;
  const mxval_kernel a = Variant(RunA);
  g_order.clear();
  EXPECT_EQ((*dc)->TimeInterleaved({{&a, kConfig, 0}, {&a, bad, 0}}, TimingOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g_order, "");  // refused before anything ran
}

TEST(DeviceCase, TimingRefusesAConfigTheKernelCannotRun) {
  auto rt = NewHostRuntime();
  CaseData d = MakeCase();
  auto dc = DeviceCase::Upload(*rt, d);
  ASSERT_TRUE(dc.ok());
  TileConfig bad = kConfig;
  bad.block_k = 48;
  EXPECT_EQ((*dc)->Time(CpuKernel(), bad, TimingOptions{}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mxval
