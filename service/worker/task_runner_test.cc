#include "service/worker/task_runner.h"

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

TEST(TaskRunner, BuggyCandidateFromAPluginDirectoryFails) {
  KernelResolver k(MXVAL_PLUGIN_DIR);
  v1::TaskSpec t = Task(192);
  t.mutable_candidate_kernel()->set_library("example_plugin_buggy");
  t.mutable_candidate_kernel()->set_kernel("example_naive");
  t.mutable_candidate_kernel()->set_build_id("example-buggy-1");
  auto r = RunTask(t, k, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->baseline().accuracy().verdict(), v1::VERDICT_PASS);
  EXPECT_EQ(r->candidate().accuracy().verdict(), v1::VERDICT_FAIL_CATASTROPHIC) << r->candidate().accuracy().reason();
  // The same plugin is fine where its bug does not bite (K=128).
  t = Task(128);
  t.mutable_candidate_kernel()->set_library("example_plugin_buggy");
  t.mutable_candidate_kernel()->set_kernel("example_naive");
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
  t.mutable_candidate_kernel()->set_library("example_plugin");
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
  EXPECT_EQ(RunTask(t, k, {int64_t{1} << 20, 0}).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace mxval::worker
