#include "service/worker/child_runner.h"

#include <signal.h>

#include <fstream>
#include <thread>

#include "common/digest.h"
#include "common/tree_digest.h"
#include "tests/process_util.h"
#include "absl/time/clock.h"
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

// A serving child in Python speaking PersistentChild's protocol: it echoes
// each task's bytes with its pid, and crashes, hangs or exits on request.
ChildOptions EchoServer() {
  ChildOptions o;
  o.argv = {"/usr/bin/python3", "-c", R"(
import os, signal, struct, sys, time
stdin, out = sys.stdin.buffer, sys.stdout.buffer
while True:
    h = stdin.read(4)
    if len(h) < 4:
        sys.exit(0)
    task = stdin.read(struct.unpack("<I", h)[0])
    print("got", task.decode(), file=sys.stderr, flush=True)
    if task == b"crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if task == b"hang":
        time.sleep(600)
    if task == b"exit":
        sys.exit(4)
    reply = task + b"@" + str(os.getpid()).encode()
    out.write(struct.pack("<I", len(reply)) + reply + struct.pack("<Ii", 0, 7 if task == b"seven" else 0))
    out.flush()
)"};
  o.stderr_tail_bytes = 256;
  return o;
}

TEST(PersistentChild, ServesTaskAfterTaskAndReplacesAChildThatCrashedHungOrExited) {
  PersistentChild child(EchoServer(), /*max_tasks=*/3);
  auto a = child.Run("one", absl::Seconds(30));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->success) << a->Describe() << " " << a->stderr_tail;
  const std::string pid = a->out.substr(a->out.find('@') + 1);
  EXPECT_EQ(a->out, "one@" + pid);
  EXPECT_NE(a->stderr_tail.find("got one"), std::string::npos);
  auto b = child.Run("two", absl::Seconds(30));
  ASSERT_TRUE(b.ok() && b->success);
  EXPECT_EQ(b->out, "two@" + pid);  // the same process
  EXPECT_EQ(b->stderr_tail.find("got one"), std::string::npos);  // each task's own stderr
  auto seven = child.Run("seven", absl::Seconds(30));  // a non-zero exit code in the end frame
  ASSERT_TRUE(seven.ok());
  EXPECT_FALSE(seven->success);
  EXPECT_EQ(seven->exit_code, 7);
  EXPECT_EQ(child.tasks_run(), 3);
  // After max_tasks, a new child.
  auto c = child.Run("three", absl::Seconds(30));
  ASSERT_TRUE(c.ok() && c->success);
  const std::string pid2 = c->out.substr(c->out.find('@') + 1);
  EXPECT_NE(pid2, pid);
  EXPECT_EQ(child.tasks_run(), 1);
  // A crash is that task's outcome; the next task gets a new child.
  auto crash = child.Run("crash", absl::Seconds(30));
  ASSERT_TRUE(crash.ok());
  EXPECT_FALSE(crash->success);
  EXPECT_EQ(crash->signal, SIGSEGV);
  EXPECT_FALSE(child.running());
  auto d = child.Run("four", absl::Seconds(30));
  ASSERT_TRUE(d.ok() && d->success) << d->Describe();
  EXPECT_NE(d->out.substr(d->out.find('@') + 1), pid2);
  // A hang is killed by the watchdog.
  auto hang = child.Run("hang", absl::Seconds(2));
  ASSERT_TRUE(hang.ok());
  EXPECT_TRUE(hang->timed_out);
  EXPECT_EQ(hang->signal, SIGKILL);
  EXPECT_FALSE(child.running());
  // A child that exits without its end frame: how it ended, not a success.
  auto ex = child.Run("exit", absl::Seconds(30));
  ASSERT_TRUE(ex.ok());
  EXPECT_FALSE(ex->success);
  EXPECT_EQ(ex->exit_code, 4);
  auto e = child.Run("five", absl::Seconds(30));
  ASSERT_TRUE(e.ok() && e->success);
}

// The real Python task child: mxval_pyhost.py --serve in Debian's python3
// (PyTorch 1.13, CPU) with libmxval_task.so, running a CPU kernel of the C
// ABI against the PyTorch example library, task after task in one process.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MXVAL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MXVAL_SANITIZED 1
#endif
#endif

TEST(PersistentChild, PythonTaskChildServesCompiledAndPythonKernels) {
#ifdef MXVAL_SANITIZED
  GTEST_SKIP() << "an instrumented libmxval_task.so cannot load into Debian's uninstrumented python3";
#endif
  const std::string kdir = testing_util::PrivateDir();
  ASSERT_EQ(std::system(("cp -r " MXVAL_SOURCE_DIR "/tests/python_kernels/torch_mxfp4 " + kdir + "/").c_str()), 0);
  auto sha = TreeSha256(kdir + "/torch_mxfp4");
  ASSERT_TRUE(sha.ok()) << sha.status();
  v1::TaskSpec t = Task("mxval-builtin-cpu");
  t.set_activations(v1::ACTIVATIONS_MXFP4_EVEN);
  v1::KernelRef* k = t.mutable_candidate_kernel();
  k->set_library("torch_mxfp4");
  k->set_kernel("a16wfp4_torch");
  k->set_build_id("correct");
  k->set_sha256(*sha);
  k->set_format(v1::LIBRARY_FORMAT_PYTHON);
  t.set_candidate_config_json(R"({"BLOCK_SIZE_M":6,"BLOCK_SIZE_N":32,"BLOCK_SIZE_K":64,"NUM_KSPLIT":2})");
  t.mutable_candidate_config()->set_ksplit(2);
  ChildOptions o;
  o.argv = {"/usr/bin/python3", "-I", MXVAL_PYHOST, "--task-lib", MXVAL_TASK_LIB, "--cache-dir", kdir + "/cache",
            "--serve", "--", "--kernel-dir", kdir, "--scratch-dir", kdir, "--threads", "1"};
  PersistentChild child(o);
  for (int i = 0; i < 2; ++i) {
    t.mutable_inputs()->set_seed(100 + i);
    auto r = child.Run(t.SerializeAsString(), absl::Seconds(120));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->success) << r->Describe() << ": " << r->stderr_tail;
    const std::vector<v1::TaskResult> written = ParseChildResults(r->out);
    ASSERT_EQ(written.size(), 1u);
    const v1::TaskResult& res = written[0];
    EXPECT_EQ(res.baseline().accuracy().verdict(), v1::VERDICT_PASS) << res.baseline().accuracy().reason();
    EXPECT_EQ(res.candidate().accuracy().verdict(), v1::VERDICT_PASS) << res.candidate().accuracy().reason();
    EXPECT_EQ(res.candidate().config_json(), t.candidate_config_json());
    EXPECT_EQ(res.python().interpreter(), "/usr/bin/python3");
    EXPECT_FALSE(res.python().torch_version().empty());
    EXPECT_EQ(res.python().backend(), "cpu");
  }
  EXPECT_EQ(child.tasks_run(), 2);
  // A tree that is not the registered one is refused, naming both digests;
  // the library already imported is not reloaded from disk, so this asks for
  // a digest it has not loaded.
  k->set_sha256(std::string(64, 'e'));
  auto bad = child.Run(t.SerializeAsString(), absl::Seconds(120));
  ASSERT_TRUE(bad.ok() && bad->success) << bad->Describe() << ": " << bad->stderr_tail;
  const v1::TaskResult res = ParseChildResults(bad->out).back();
  EXPECT_EQ(res.candidate().accuracy().verdict(), v1::VERDICT_ERROR);
  EXPECT_NE(res.candidate().accuracy().reason().find(*sha), std::string::npos) << res.candidate().accuracy().reason();
  EXPECT_NE(res.candidate().accuracy().reason().find(std::string(64, 'e')), std::string::npos);
}

// The pid a child wrote to `path`, once it is there (bounded wait).
int WaitForPid(const std::string& path) {
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (absl::Now() < until) {
    std::ifstream f(path);
    int pid = 0;
    if (f >> pid && pid > 0) return pid;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ADD_FAILURE() << "no pid in " << path;
  return 0;
}

// Polls until `pid` has ended; false if it is still alive after a generous bound.
bool Ends(int pid) {
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (testing_util::ProcessAlive(pid)) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// A Python child that starts a grandchild (as a kernel's compiler or a
// subprocess would) and waits: a cancel from another thread ends the run at
// once, and the grandchild dies with the child's process group.
TEST(ChildRunner, CancelKillsTheChildAndItsGrandchildren) {
  const std::string dir = testing_util::PrivateDir();
  ChildOptions o;
  o.argv = {"/usr/bin/python3", "-c", R"(
import os, subprocess, sys
g = subprocess.Popen(["sleep", "600"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d %d" % (os.getpid(), g.pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
g.wait()
)", dir + "/pids"};
  o.timeout = absl::Seconds(600);
  ChildCancel cancel;
  o.cancel = &cancel;
  int child = 0, grandchild = 0;
  std::thread canceller([&] {
    child = WaitForPid(dir + "/pids");
    std::ifstream f(dir + "/pids");
    f >> child >> grandchild;
    EXPECT_TRUE(testing_util::ProcessAlive(grandchild));
    cancel.Cancel();
  });
  auto r = RunChild(o, "");
  canceller.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->cancelled);
  EXPECT_FALSE(r->success);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_EQ(r->Describe(), "cancelled (process group killed)");
  ASSERT_GT(grandchild, 0);
  EXPECT_FALSE(testing_util::ProcessAlive(child));
  EXPECT_TRUE(Ends(grandchild)) << "grandchild " << grandchild << " outlived the cancel";
  // A cancelled token starts nothing.
  o.argv = {"/bin/sh", "-c", "echo started > '" + dir + "/started'"};
  auto again = RunChild(o, "");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->cancelled);
  EXPECT_FALSE(std::ifstream(dir + "/started").good());
}

// A cancel during a serving child's task kills that child; the next task
// gets a new one.
TEST(PersistentChild, CancelKillsTheTaskAndTheNextTaskGetsANewChild) {
  PersistentChild child(EchoServer());
  auto a = child.Run("one", absl::Seconds(30));
  ASSERT_TRUE(a.ok() && a->success) << a->Describe();
  const int pid = std::stoi(a->out.substr(a->out.find('@') + 1));
  ChildCancel cancel;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));  // lets the task start; the outcome does not depend on it
    cancel.Cancel();
  });
  auto hang = child.Run("hang", absl::Seconds(600), &cancel);
  canceller.join();
  ASSERT_TRUE(hang.ok());
  EXPECT_TRUE(hang->cancelled);
  EXPECT_FALSE(hang->timed_out);
  EXPECT_FALSE(child.running());
  EXPECT_TRUE(Ends(pid));
  auto b = child.Run("two", absl::Seconds(30));
  ASSERT_TRUE(b.ok() && b->success) << b->Describe();
  EXPECT_NE(std::stoi(b->out.substr(b->out.find('@') + 1)), pid);
}

}  // namespace
}  // namespace mxval::worker
