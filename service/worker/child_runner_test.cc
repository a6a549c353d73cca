#include "service/worker/child_runner.h"

#include <signal.h>

#include "common/digest.h"
#include "gtest/gtest.h"
#include "mxval/v1/mxval.pb.h"
#include "service/worker/child_results.h"

namespace mxval::worker {
namespace {

v1::TaskSpec Task(const std::string& candidate_library) {
  v1::TaskSpec t;
  t.set_task_id("job-1-t0");
  v1::Shape* s = t.mutable_shape();
  s->set_op(v1::OP_VUP);
  s->set_b(2);
  s->set_n(32);
  s->set_k(128);
  s->set_layout(v1::OUTPUT_LAYOUT_BATCH_MAJOR);
  t.set_m(9);
  t.set_repetitions(1);
  t.mutable_tolerance()->set_atol(1e-5);
  t.mutable_tolerance()->set_rtol(1.6e-2);
  t.mutable_baseline_kernel()->set_library("mxval-builtin-cpu");
  t.mutable_baseline_kernel()->set_kernel("a16wfp4_cpu");
  t.mutable_candidate_kernel()->set_library(candidate_library);
  t.mutable_candidate_kernel()->set_kernel(candidate_library == "mxval-builtin-cpu" ? "a16wfp4_cpu" : "example_naive");
  if (candidate_library != "mxval-builtin-cpu") {  // as the coordinator stamps it from the registration
    t.mutable_candidate_kernel()->set_sha256(
        *Sha256HexOfFile(std::string(MXVAL_PLUGIN_DIR) + "/lib" + candidate_library + ".so"));
  }
  for (v1::TileConfig* c : {t.mutable_baseline_config(), t.mutable_candidate_config()}) {
    c->set_block_m(6);
    c->set_block_n(32);
    c->set_block_k(128);
    c->set_ksplit(1);
  }
  return t;
}

ChildOptions Child(absl::Duration timeout = absl::Seconds(60)) {
  ChildOptions o;
  o.argv = {MXVAL_BIN, "__run-task", "--kernel-dir", MXVAL_PLUGIN_DIR, "--threads", "1"};
  o.timeout = timeout;
  return o;
}

TEST(ChildRunner, TaskRunsInAChildAndReturnsItsResult) {
  auto r = RunChild(Child(), Task("example_plugin").SerializeAsString());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->success) << r->Describe() << ": " << r->stderr_tail;
  // A CPU task measures no roofline, so the child writes no checkpoint:
  // one delimited message, the whole result.
  const std::vector<v1::TaskResult> written = ParseChildResults(r->out);
  ASSERT_EQ(written.size(), 1u);
  const v1::TaskResult& result = written[0];
  EXPECT_EQ(result.task_id(), "job-1-t0");
  EXPECT_EQ(result.baseline().accuracy().verdict(), v1::VERDICT_PASS);
  EXPECT_EQ(result.candidate().accuracy().verdict(), v1::VERDICT_PASS) << result.candidate().accuracy().reason();
}

TEST(ChildRunner, SegfaultingKernelIsAnOutcomeNotACrash) {
  auto r = RunChild(Child(), Task("example_plugin_crash").SerializeAsString());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->success);
  EXPECT_EQ(r->signal, SIGSEGV);
  EXPECT_NE(r->Describe().find("signal 11"), std::string::npos) << r->Describe();
}

TEST(ChildRunner, HangingKernelIsKilledByTheWatchdog) {
  auto r = RunChild(Child(absl::Seconds(3)), Task("example_plugin_hang").SerializeAsString());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->success);
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
}

TEST(ChildRunner, ExitCodeAndStderrTail) {
  ChildOptions o;
  o.argv = {"/bin/sh", "-c", "head -c 10000 /dev/zero | tr '\\\\0' x >&2; echo 'the last words' >&2; exit 3"};
  o.stderr_tail_bytes = 64;
  auto r = RunChild(o, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->Describe(), "exit code 3");
  EXPECT_LE(r->stderr_tail.size(), 64u);
  EXPECT_NE(r->stderr_tail.find("the last words"), std::string::npos);
  // A bad task is a clean non-zero exit of the child, not a crash.
  auto bad = RunChild(Child(), "not a task");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->exit_code, 2);
  EXPECT_NE(bad->stderr_tail.find("TaskSpec"), std::string::npos);
  o.argv = {"/nonexistent/binary"};
  EXPECT_EQ(RunChild(o, "").status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace mxval::worker
