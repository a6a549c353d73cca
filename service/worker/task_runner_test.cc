#include "service/worker/task_runner.h"

#include <unistd.h>

#include "common/digest.h"
#include "gtest/gtest.h"

namespace mxval::worker {
namespace {

v1::TaskSpec Task(int64_t K = 192) {
  v1::TaskSpec t;
  t.set_task_id("job-1-t0");
  v1::Shape* s = t.mutable_shape();
  s->set_op(v1::OP_KUP);
  s->set_b(3);
  s->set_n(64);
  s->set_k(K);
  s->set_layout(v1::OUTPUT_LAYOUT_HEAD_MAJOR);
  s->set_strided_x(true);
  s->set_x_pitch_extra(64);
  t.set_m(21);
  t.set_arch("cpu");
  t.mutable_inputs()->set_seed(7);
  t.mutable_tolerance()->set_atol(1e-5);
  t.mutable_tolerance()->set_rtol(1.6e-2);
  t.set_repetitions(3);
  for (v1::KernelRef* k : {t.mutable_baseline_kernel(), t.mutable_candidate_kernel()}) {
    k->set_library("mxval-builtin-cpu");
    k->set_kernel("a16wfp4_cpu");
  }
  for (v1::TileConfig* c : {t.mutable_baseline_config(), t.mutable_candidate_config()}) {
    c->set_block_m(12);
    c->set_block_n(64);
    c->set_block_k(64);
    c->set_ksplit(1);
  }
  t.set_baseline_entry("kup/N=512,K=192/M_LEQ_16");
  t.set_candidate_entry("override");
  return t;
}

TEST(TaskRunner, BuiltInKernelsPassWithTimings) {
  KernelResolver k;
  auto r = RunTask(Task(), k, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->task_id(), "job-1-t0");
  EXPECT_EQ(r->baseline().accuracy().verdict(), v1::VERDICT_PASS) << r->baseline().accuracy().reason();
  EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_PASS);
  EXPECT_EQ(r->baseline().dispatch_entry(), "kup/N=512,K=192/M_LEQ_16");
  EXPECT_GT(r->baseline().timing().median_us(), 0);
  EXPECT_LE(r->baseline().timing().p10_us(), r->baseline().timing().p90_us());
  EXPECT_GT(r->baseline().accuracy().checked(), 0);
  EXPECT_EQ(r->baseline().launch(), v1::LAUNCH_MODE_PLAIN);
}

// A launch=pdl task on the CPU kernel: it does not act on the flag, so it
// runs (and is reported) plain.
TEST(TaskRunner, PdlTaskOnAKernelWithoutPdlRunsPlain) {
  KernelResolver k;
  v1::TaskSpec t = Task();
  t.set_launch(v1::LAUNCH_MODE_PDL);
  auto r = RunTask(t, k, {});
  ASSERT_TRUE(r.ok()) << r.status();
  for (const v1::KernelRun* side : {&r->baseline(), &r->candidate()}) {
    EXPECT_EQ(side->accuracy().verdict(), v1::VERDICT_PASS) << side->accuracy().reason();
    EXPECT_EQ(side->launch(), v1::LAUNCH_MODE_PLAIN);
  }
}

// A job can ask for extreme scale bytes (w_generator "extreme-scales"): the
// task's case carries them and the built-in kernel still matches the
// reference on them, in both activation modes.
TEST(TaskRunner, ExtremeScaleWeightsReachTheKernels) {
  KernelResolver k;
  for (auto acts : {v1::ACTIVATIONS_BF16, v1::ACTIVATIONS_MXFP4_EVEN}) {
    v1::TaskSpec t = Task(512);
    t.mutable_inputs()->set_w_generator("extreme-scales");
    t.set_activations(acts);
    auto r = RunTask(t, k, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->baseline().accuracy().verdict(), v1::VERDICT_PASS) << r->baseline().accuracy().reason();
    EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_PASS) << r->candidate().accuracy().reason();
  }
  v1::TaskSpec t = Task();
  t.mutable_inputs()->set_x_generator("extreme-scales");  // weights only
  const auto r = RunTask(t, k, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("task.inputs.x_generator"), std::string::npos) << r.status();
}

TEST(TaskRunner, GpuKernelWithoutAMatchingDeviceIsAnError) {
  // The CUDA built-in library exists (built) or not; either way, without a
  // CUDA device the side is VERDICT_ERROR naming why, and the CPU side runs.
  KernelResolver k("", MXVAL_PLUGIN_DIR);
  v1::TaskSpec t = Task();
  t.mutable_candidate_kernel()->set_library("mxval-builtin-cuda");
  t.mutable_candidate_kernel()->set_kernel("a16wfp4_tc");
  auto host = NewHostRuntime();
  for (DeviceRuntime* rt : {static_cast<DeviceRuntime*>(nullptr), host.get()}) {
    TaskRunnerOptions o;
    o.runtime = rt;
    auto r = RunTask(t, k, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->baseline().accuracy().verdict(), v1::VERDICT_PASS);
    EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_ERROR);
    EXPECT_FALSE(r->candidate().accuracy().reason().empty());
  }
  KernelResolver no_builtin;
  auto missing = no_builtin.Resolve(t.candidate_kernel());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(TaskRunner, ClockWindowsAreReportedWithTheirReasonsByName) {
  ClockSummary c = SummarizeClocks({{1980, 0x1, 300000}, {1515, 0x4 | 0x20, 695000}, {1800, 0, 500000}});
  c.source = "nvml";
  c.settle_s = 0.25;
  v1::ClockWindow w;
  FillClock(c, &w);
  EXPECT_EQ(w.source(), "nvml");
  EXPECT_EQ(w.samples(), 3);
  EXPECT_EQ(w.sm_mhz_min(), 1515);
  EXPECT_EQ(w.sm_mhz_median(), 1800);
  EXPECT_EQ(w.sm_mhz_max(), 1980);
  EXPECT_EQ(w.event_reasons(), 0x24u);
  ASSERT_EQ(w.reasons_size(), 2);
  EXPECT_EQ(w.reasons(0), "sw_power_cap");
  EXPECT_EQ(w.reasons(1), "sw_thermal");
  EXPECT_DOUBLE_EQ(w.power_w_max(), 695.0);
  EXPECT_DOUBLE_EQ(w.settle_s(), 0.25);
  EXPECT_TRUE(w.settled());
  EXPECT_TRUE(w.disturbed());
  // A steady window is not disturbed; one whose settle wait gave up is.
  c = SummarizeClocks({{1980, 0, 0}, {1980, 0, 0}});
  FillClock(c, &w);
  EXPECT_FALSE(w.disturbed());
  EXPECT_EQ(w.reasons_size(), 0);
  c.settled = false;
  FillClock(c, &w);
  EXPECT_TRUE(w.disturbed());
  EXPECT_FALSE(w.settled());
}

// The device's ceilings go into the result; each timed device side gets
// max(FLOPs / rate, bytes / bandwidth) as its floor and floor / median as its
// fraction; an untimed side and a roofline without a bandwidth give none.
TEST(TaskRunner, RooflineFloorAndFractionPerTimedDeviceSide) {
  const GemmShape shape{16, 4096, 128, 512};  // DeepSeek-V3 V-up, M = 4096: memory-bound
  const double bytes = 16.0 * 4096 * 512 * 2 + 16.0 * 128 * (256 + 16) + 16.0 * 4096 * 128 * 2;
  Roofline r;
  r.copy_bytes_per_s = 4.12e12;
  r.bf16_flops_per_s = 782e12;
  r.note = "measured";
  v1::TaskResult result;
  result.mutable_baseline()->mutable_timing()->set_median_us(24.42);
  // The candidate was not timed (median 0): no floor for it.
  FillRoofline(r, shape, &result, {result.mutable_baseline(), result.mutable_candidate()});
  EXPECT_DOUBLE_EQ(result.roofline().copy_gbps(), 4120);
  EXPECT_DOUBLE_EQ(result.roofline().bf16_tflops(), 782);
  EXPECT_EQ(result.roofline().note(), "measured");
  EXPECT_NEAR(result.baseline().timing().floor_us(), bytes / 4.12e12 * 1e6, 1e-9);
  EXPECT_NEAR(result.baseline().timing().floor_us(), 20.5, 0.1);  // BENCHMARKS.md's floor for this row
  EXPECT_NEAR(result.baseline().timing().roofline_fraction(), bytes / 4.12e12 / 24.42e-6, 1e-9);
  EXPECT_EQ(result.candidate().timing().floor_us(), 0);
  EXPECT_EQ(result.candidate().timing().roofline_fraction(), 0);
  // A compute-bound shape takes the GEMM term.
  const GemmShape big{1, 8192, 8192, 8192};
  v1::TaskResult gemm;
  gemm.mutable_candidate()->mutable_timing()->set_median_us(2000);
  FillRoofline(r, big, &gemm, {gemm.mutable_candidate()});
  EXPECT_NEAR(gemm.candidate().timing().floor_us(), 2.0 * 8192 * 8192 * 8192 / 782e12 * 1e6, 1e-6);
  // No copy bandwidth, no floor; the note says why.
  Roofline none;
  none.note = "copy bandwidth not measured: out of memory";
  v1::TaskResult bare;
  bare.mutable_baseline()->mutable_timing()->set_median_us(5);
  FillRoofline(none, shape, &bare, {bare.mutable_baseline()});
  EXPECT_EQ(bare.baseline().timing().floor_us(), 0);
  EXPECT_EQ(bare.baseline().timing().roofline_fraction(), 0);
  EXPECT_EQ(bare.roofline().note(), none.note);
}

// CPU-only tasks never measure a roofline (no device side was timed).
TEST(TaskRunner, CpuTasksCarryNoRoofline) {
  KernelResolver k;
  auto r = RunTask(Task(), k, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_roofline());
  EXPECT_EQ(r->baseline().timing().roofline_fraction(), 0);
}

TEST(TaskRunner, DevicesWithoutAClockReaderSayWhy) {
  auto host = NewHostRuntime();
  std::string note;
  EXPECT_EQ(OpenDeviceClocks(*host, 0, &note), nullptr);
  EXPECT_EQ(note, "no clock reader for host devices");
}

// An external library as the coordinator hands it out: name, kernel and the registered digest.
void UsePlugin(v1::KernelRef* k, const std::string& name) {
  k->set_library(name);
  k->set_kernel("example_naive");
  k->set_sha256(*Sha256HexOfFile(std::string(MXVAL_PLUGIN_DIR) + "/lib" + name + ".so"));
}

TEST(TaskRunner, BuggyCandidateFromAPluginDirectoryFails) {
  KernelResolver k(MXVAL_PLUGIN_DIR);
  v1::TaskSpec t = Task(192);
  UsePlugin(t.mutable_candidate_kernel(), "example_plugin_buggy");
  t.mutable_candidate_kernel()->set_build_id("example-buggy-1");
  auto r = RunTask(t, k, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->baseline().accuracy().verdict(), v1::VERDICT_PASS);
  EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_FAIL_CATASTROPHIC) << r->candidate().accuracy().reason();
  // The same plugin is fine where its bug does not bite (K=128).
  t = Task(128);
  UsePlugin(t.mutable_candidate_kernel(), "example_plugin_buggy");
  r = RunTask(t, k, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_PASS);
}

TEST(TaskRunner, KernelProblemsAreVerdictErrorsWithReasons) {
  KernelResolver k(MXVAL_PLUGIN_DIR);
  v1::TaskSpec t = Task();
  t.mutable_candidate_kernel()->set_library("no_such_library");
  auto r = RunTask(t, k, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_ERROR);
  EXPECT_EQ(r->baseline().accuracy().verdict(), v1::VERDICT_PASS);
  t = Task();
  t.mutable_candidate_config()->set_block_n(24);  // not a multiple of 16
  r = RunTask(t, k, {});
  EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_ERROR);
  EXPECT_NE(r->candidate().accuracy().reason().find("BLOCK_SIZE_N"), std::string::npos);
  t = Task();
  UsePlugin(t.mutable_candidate_kernel(), "example_plugin");
  t.mutable_candidate_kernel()->set_build_id("other-build");
  r = RunTask(t, k, {});
  EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_ERROR);
  EXPECT_NE(r->candidate().accuracy().reason().find("build_id"), std::string::npos);
}

TEST(TaskRunner, MalformedTasksAreInvalidArgument) {
  KernelResolver k;
  v1::TaskSpec t = Task();
  t.mutable_shape()->set_k(100);
  EXPECT_EQ(RunTask(t, k, {}).status().code(), absl::StatusCode::kInvalidArgument);
  t = Task();
  t.mutable_inputs()->set_x_generator("cauchy");
  EXPECT_EQ(RunTask(t, k, {}).status().code(), absl::StatusCode::kInvalidArgument);
  t = Task();
  t.set_m(1 << 22);
  t.mutable_shape()->set_b(4096);
  TaskRunnerOptions small;
  small.max_task_bytes = int64_t{1} << 20;
  EXPECT_EQ(RunTask(t, k, small).status().code(), absl::StatusCode::kResourceExhausted);
}


// A worker loads an external library only from its kernel directory and only
// when the file's digest is the registered one.
TEST(TaskRunner, ExternalLibrariesLoadOnlyWithTheRegisteredDigestFromTheKernelDir) {
  const std::string dir = ::testing::TempDir() + "/mxval_kernel_dir_" + std::to_string(getpid());
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir + "/inner").c_str()), 0);
  const std::string good = std::string(MXVAL_PLUGIN_DIR) + "/libexample_plugin.so";
  ASSERT_EQ(system(("cp " + good + " " + dir + "/libexample_plugin.so").c_str()), 0);
  const std::string sha = *Sha256HexOfFile(good);
  auto run = [&](v1::KernelRef ref) {
    KernelResolver k(dir);
    v1::TaskSpec t = Task();
    *t.mutable_candidate_kernel() = ref;
    auto r = RunTask(t, k, {});
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->baseline().accuracy().verdict(), v1::VERDICT_PASS);
    return r->candidate().accuracy();
  };
  v1::KernelRef ref;
  ref.set_library("example_plugin");
  ref.set_kernel("example_naive");
  ref.set_sha256(sha);
  EXPECT_EQ(run(ref).verdict(), v1::VERDICT_PASS) << run(ref).reason();
  // Libraries loaded one after another in one process (each resolver gone
  // before the next) are each themselves: the loader must not hand back the
  // first one because the second reuses its descriptor number.
  {
    KernelResolver k(MXVAL_PLUGIN_DIR);
    v1::TaskSpec t = Task(192);
    UsePlugin(t.mutable_candidate_kernel(), "example_plugin_buggy");
    t.mutable_candidate_kernel()->set_build_id("example-buggy-1");
    auto r = RunTask(t, k, {});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_FAIL_CATASTROPHIC) << r->candidate().accuracy().reason();
  }
  // Another digest: refused, both digests named.
  v1::KernelRef wrong = ref;
  wrong.set_sha256(std::string(64, '0'));
  v1::Accuracy a = run(wrong);
  EXPECT_EQ(a.verdict(), v1::VERDICT_ERROR);
  EXPECT_NE(a.reason().find("SHA-256 " + sha), std::string::npos) << a.reason();
  EXPECT_NE(a.reason().find(std::string(64, '0')), std::string::npos) << a.reason();
  // No digest (a task that did not come through registration): refused.
  v1::KernelRef none = ref;
  none.clear_sha256();
  EXPECT_NE(run(none).reason().find("only registered libraries run"), std::string::npos) << run(none).reason();
  // Names that would leave the directory: refused before any file is touched.
  for (const char* name : {"../example_plugin", "inner/../example_plugin", ".hidden", "a b"}) {
    v1::KernelRef bad = ref;
    bad.set_library(name);
    v1::Accuracy b = run(bad);
    EXPECT_EQ(b.verdict(), v1::VERDICT_ERROR) << name;
    EXPECT_NE(b.reason().find("library name"), std::string::npos) << name << ": " << b.reason();
  }
  // A symlink in the directory that points outside it: refused even with the right digest.
  ASSERT_EQ(symlink(good.c_str(), (dir + "/libescape.so").c_str()), 0);
  v1::KernelRef escape = ref;
  escape.set_library("escape");
  EXPECT_NE(run(escape).reason().find("outside the kernel directory"), std::string::npos) << run(escape).reason();
  // A symlink inside the directory is fine (libfoo.so -> libfoo.so.1 installs).
  ASSERT_EQ(symlink((dir + "/libexample_plugin.so").c_str(), (dir + "/libalias.so").c_str()), 0);
  v1::KernelRef alias = ref;
  alias.set_library("alias");
  EXPECT_EQ(run(alias).verdict(), v1::VERDICT_PASS) << run(alias).reason();
  // The file changes after registration (a swapped build): refused.
  ASSERT_EQ(system(("cp " + std::string(MXVAL_PLUGIN_DIR) + "/libexample_plugin_buggy.so " + dir + "/new.so && mv " +
                    dir + "/new.so " + dir + "/libexample_plugin.so").c_str()),
            0);
  EXPECT_NE(run(ref).reason().find("refusing to load it"), std::string::npos) << run(ref).reason();
  ASSERT_EQ(system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace mxval::worker
