#include "common/digest.h"
#include "service/worker/worker.h"

#include <sys/stat.h>

#include <fstream>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "service/coordinator/coordinator_service.h"
#include "service/worker/child_results.h"
#include "tests/process_util.h"

namespace mxval::worker {
namespace {

using coordinator::Coordinator;
using coordinator::CoordinatorOptions;
using coordinator::Scheduler;

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.max_long_poll = absl::Milliseconds(300);
    libraries_ = std::move(*coordinator::LibraryRegistry::Create(nullptr));
    v1::KernelLibraryRegistration reg;
    reg.set_name("example_plugin_crash");
    reg.set_build_id("example-1");
    reg.set_sha256(*Sha256HexOfFile(std::string(MXVAL_PLUGIN_DIR) + "/libexample_plugin_crash.so"));
    ASSERT_TRUE(libraries_->Register(reg, "test", absl::Now()).ok());
    o.libraries = libraries_.get();
    coordinator_ = std::make_unique<Coordinator>(RealClock::Get(), &scheduler_, o);
    server_ = coordinator::StartServer("127.0.0.1:0", coordinator_.get(), &port_);
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_->Shutdown(); }
  std::unique_ptr<coordinator::LibraryRegistry> libraries_;

  std::unique_ptr<Worker> NewWorker(const std::string& id, int unhealthy_after = 100,
                                    std::vector<std::string> child_argv = {}) {
    WorkerOptions o;
    o.coordinator = "127.0.0.1:" + std::to_string(port_);
    o.worker_id = id;
    o.child_argv = child_argv.empty()
                       ? std::vector<std::string>{MXVAL_BIN, "__run-task", "--kernel-dir", MXVAL_PLUGIN_DIR, "--threads", "1"}
                       : child_argv;
    o.long_poll = absl::Milliseconds(300);
    o.task_timeout = absl::Seconds(60);
    o.unhealthy_after = unhealthy_after;
    auto w = Worker::Create(o);
    EXPECT_TRUE(w.ok()) << w.status();
    return std::move(*w);
  }

  std::string Submit(bool crash_candidate, int ms) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_presets("dsv3-tp8");
    req.mutable_spec()->set_no_layout_probes(true);
    for (int m = 1; m <= ms; ++m) req.mutable_spec()->add_m_values(m);
    req.mutable_spec()->set_repetitions(1);
    if (crash_candidate) {
      req.mutable_spec()->mutable_candidate_kernel()->set_library("example_plugin_crash");
      req.mutable_spec()->mutable_candidate_kernel()->set_kernel("example_naive");
      req.mutable_spec()->mutable_candidate_kernel()->set_build_id("example-1");
    }
    v1::SubmitJobResponse resp;
    grpc::ServerContext ctx;
    EXPECT_TRUE(coordinator_->SubmitJob(&ctx, &req, &resp).ok());
    return resp.job().job_id();
  }

  // Waits (bounded) until the job is final; the bound only guards against a hang.
  v1::Job WaitDone(const std::string& job_id) {
    const absl::Time until = absl::Now() + absl::Seconds(120);
    while (absl::Now() < until) {
      auto job = coordinator_->BuildJob(job_id, true);
      if (job.ok() && job->state() == v1::JOB_STATE_DONE) return *job;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "job " << job_id << " did not finish";
    return *coordinator_->BuildJob(job_id, true);
  }

  // A child script in `dir` running `body` after reading its stdin (the
  // TaskSpec).
  std::string ScriptChild(const std::string& dir, const std::string& body) {
    const std::string script = dir + "/child.sh";
    std::ofstream(script) << "#!/bin/sh\ncat >/dev/null\n" << body;
    EXPECT_EQ(chmod(script.c_str(), 0755), 0);
    return script;
  }
  // Runs a one-M job on one worker whose child is `script`; the job and
  // the (drained) worker.
  std::pair<v1::Job, std::unique_ptr<Worker>> RunWithChild(const std::string& script) {
    std::unique_ptr<Worker> w = NewWorker("w1", 100, {"/bin/sh", script});
    std::thread t([&] { EXPECT_TRUE(w->Run().ok()); });
    v1::Job job = WaitDone(Submit(false, 1));
    w->Drain();
    t.join();
    return {std::move(job), std::move(w)};
  }

  Scheduler scheduler_{RealClock::Get(), coordinator::WithFailurePredicate(coordinator::MakeSchedulerOptions(absl::Seconds(30), 3, 10000))};
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(WorkerTest, TwoWorkersCompleteAJobWithEveryResultOnce) {
  auto w1 = NewWorker("w1"), w2 = NewWorker("w2");
  std::thread t1([&] { EXPECT_TRUE(w1->Run().ok()); }), t2([&] { EXPECT_TRUE(w2->Run().ok()); });
  const v1::Job job = WaitDone(Submit(false, 3));
  w1->Drain();
  w2->Drain();
  t1.join();
  t2.join();
  ASSERT_EQ(job.results_size(), 6);
  for (const v1::TaskResult& r : job.results()) {
    EXPECT_EQ(r.baseline().accuracy().verdict(), v1::VERDICT_PASS) << r.baseline().accuracy().reason();
    EXPECT_EQ(r.candidate().accuracy().verdict(), v1::VERDICT_PASS);
    EXPECT_EQ(r.attempts_size(), 1);
  }
  EXPECT_EQ(w1->tasks_completed() + w2->tasks_completed(), 6);
  EXPECT_EQ(job.progress().tasks_failed(), 0);
}

TEST_F(WorkerTest, CrashingKernelIsInfraAndTheWorkerGoesOn) {
  auto w1 = NewWorker("w1"), w2 = NewWorker("w2");
  std::thread t1([&] { EXPECT_TRUE(w1->Run().ok()); }), t2([&] { EXPECT_TRUE(w2->Run().ok()); });
  const v1::Job crashed = WaitDone(Submit(true, 1));
  ASSERT_EQ(crashed.results_size(), 2);
  for (const v1::TaskResult& r : crashed.results()) {
    ASSERT_EQ(r.attempts_size(), 3);  // retried up to the limit, on both workers
    std::set<std::string> workers;
    for (const v1::Attempt& a : r.attempts()) {
      EXPECT_EQ(a.failure(), v1::FAILURE_CLASS_INFRA);
      EXPECT_NE(a.failure_detail().find("signal 11"), std::string::npos) << a.failure_detail();
      workers.insert(a.worker_id());
    }
    EXPECT_EQ(workers.size(), 2u);
  }
  EXPECT_EQ(crashed.progress().tasks_failed(), 2);
  // The same workers still serve a normal job.
  const v1::Job ok = WaitDone(Submit(false, 1));
  EXPECT_EQ(ok.progress().tasks_failed(), 0);
  w1->Drain();
  w2->Drain();
  t1.join();
  t2.join();
  EXPECT_EQ(w1->infra_failures() + w2->infra_failures(), 6);
}

TEST_F(WorkerTest, RepeatedInfraFailuresMarkTheDeviceUnhealthy) {
  // Children that die on mxval's own kernels: the device is suspect.
  auto w = NewWorker("w1", /*unhealthy_after=*/2, {"/bin/sh", "-c", "kill -SEGV $$"});
  std::thread t([&] { EXPECT_TRUE(w->Run().ok()); });
  Submit(false, 1);
  t.join();  // the only device went unhealthy: Run() returns
  EXPECT_FALSE(w->device_healthy(0));
  v1::ListWorkersResponse lw;
  grpc::ServerContext ctx;
  ASSERT_TRUE(coordinator_->ListWorkers(&ctx, nullptr, &lw).ok());
  ASSERT_EQ(lw.workers_size(), 1);
  EXPECT_FALSE(lw.workers(0).capabilities().devices(0).healthy());
}

TEST_F(WorkerTest, ACrashingLibraryUnderTestDoesNotTakeTheDeviceOutOfService) {
  // A registered library (a pull request's build) whose kernel segfaults:
  // every attempt is an infrastructure failure, but the device stays
  // healthy and runs the next job.
  auto w = NewWorker("w1", /*unhealthy_after=*/2);
  std::thread t([&] { EXPECT_TRUE(w->Run().ok()); });
  const v1::Job crashed = WaitDone(Submit(true, 2));
  for (const v1::TaskResult& r : crashed.results()) EXPECT_EQ(r.triage().triage_class(), v1::TRIAGE_CLASS_INFRA);
  EXPECT_GE(w->infra_failures(), 2);
  EXPECT_TRUE(w->device_healthy(0));
  const v1::Job fine = WaitDone(Submit(false, 1));
  ASSERT_EQ(fine.results_size(), 2);
  for (const v1::TaskResult& r : fine.results()) EXPECT_EQ(r.candidate().accuracy().verdict(), v1::VERDICT_PASS);
  w->Drain();
  t.join();
}

// What a child's checkpoint holds: both sides passed and timed at 12.5 us,
// the roofline not measured.
v1::TaskResult Checkpoint() {
  v1::TaskResult cp;
  for (v1::KernelRun* side : {cp.mutable_baseline(), cp.mutable_candidate()}) {
    side->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    side->mutable_timing()->set_median_us(12.5);
  }
  cp.mutable_roofline()->set_note(kRooflineInterruptedNote);
  return cp;
}

// A task's child that wrote its checkpoint (both sides checked and timed,
// the roofline not yet measured) and then died, as one would inside the
// roofline's cuBLAS: the task is done with its checks and timings, not an
// infrastructure failure, and the roofline note says what happened. The
// child is a script replaying a checkpoint written here.
TEST_F(WorkerTest, ChildDyingAfterItsCheckpointStillDeliversTheChecks) {
  const std::string dir = testing_util::PrivateDir();
  const v1::TaskResult cp = Checkpoint();
  {
    std::ofstream f(dir + "/checkpoint.bin", std::ios::binary);
    ASSERT_TRUE(WriteChildResultsHeader(f));
    ASSERT_TRUE(WriteChildResult(cp, f));
    f << "\x07\x0a";  // the torn start of the next message: ignored
  }
  const auto [job, w] = RunWithChild(ScriptChild(dir, "cat '" + dir + "/checkpoint.bin'\nkill -SEGV $$\n"));
  ASSERT_EQ(job.results_size(), 2);
  for (const v1::TaskResult& r : job.results()) {
    ASSERT_EQ(r.attempts_size(), 1);
    EXPECT_NE(r.attempts(0).failure(), v1::FAILURE_CLASS_INFRA);
    EXPECT_EQ(r.baseline().accuracy().verdict(), v1::VERDICT_PASS);
    EXPECT_EQ(r.candidate().timing().median_us(), 12.5);
    EXPECT_NE(r.roofline().note().find(kRooflineInterruptedNote), std::string::npos) << r.roofline().note();
    EXPECT_NE(r.roofline().note().find("signal 11"), std::string::npos) << r.roofline().note();
  }
  EXPECT_EQ(job.progress().tasks_failed(), 0);
  EXPECT_EQ(w->tasks_completed(), 2);
  EXPECT_EQ(w->infra_failures(), 0);
}

// A child that wrote its whole result after the checkpoint and only then
// died (say, in a library's exit handler): the whole result is reported as
// written, with no note about how the child ended.
TEST_F(WorkerTest, ChildDyingAfterItsWholeResultKeepsThatResult) {
  const std::string dir = testing_util::PrivateDir();
  const v1::TaskResult cp = Checkpoint();
  v1::TaskResult whole = cp;
  whole.mutable_roofline()->clear_note();
  whole.mutable_roofline()->set_copy_gbps(4100);
  {
    std::ofstream f(dir + "/results.bin", std::ios::binary);
    ASSERT_TRUE(WriteChildResultsHeader(f));
    ASSERT_TRUE(WriteChildResult(cp, f));
    ASSERT_TRUE(WriteChildResult(whole, f));
  }
  const auto [job, w] = RunWithChild(ScriptChild(dir, "cat '" + dir + "/results.bin'\nkill -SEGV $$\n"));
  ASSERT_EQ(job.results_size(), 2);
  for (const v1::TaskResult& r : job.results()) {
    ASSERT_EQ(r.attempts_size(), 1);
    EXPECT_NE(r.attempts(0).failure(), v1::FAILURE_CLASS_INFRA);
    EXPECT_EQ(r.roofline().copy_gbps(), 4100);
    EXPECT_EQ(r.roofline().note(), "");
  }
  EXPECT_EQ(w->tasks_completed(), 2);
}

// A child that exits 0 without the results header (an older mxval, or
// another program): an infrastructure failure that says so, not a result
// read from bytes in another format.
TEST_F(WorkerTest, ChildOutputWithoutTheHeaderIsInfra) {
  const auto [job, w] = RunWithChild(ScriptChild(testing_util::PrivateDir(), "printf '\\n\\010job-1-t0'\n"));
  ASSERT_EQ(job.results_size(), 2);
  for (const v1::TaskResult& r : job.results()) {
    ASSERT_GE(r.attempts_size(), 1);
    for (const v1::Attempt& a : r.attempts()) {
      EXPECT_EQ(a.failure(), v1::FAILURE_CLASS_INFRA);
      EXPECT_NE(a.failure_detail().find("exit code 0, but no task result on stdout (10 bytes"), std::string::npos)
          << a.failure_detail();
    }
  }
  EXPECT_EQ(w->tasks_completed(), 0);
}

}  // namespace
}  // namespace mxval::worker
