#include "common/digest.h"
#include "service/worker/worker.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "prometheus/registry.h"
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

// Forwards the WorkerService to an in-process coordinator and records what
// the worker sent: the leases it was granted, the leases it reported, its
// heartbeats, and LeaseTask calls in flight.
class RecordingWorkerService final : public v1::WorkerService::Service {
 public:
  explicit RecordingWorkerService(Coordinator* c) : c_(c) {}
  // Forwards to `c` from now on (a coordinator that restarted and forgot its workers).
  void Use(Coordinator* c) { c_ = c; }
  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override {
    ++registrations_;
    return c_.load()->RegisterWorker(ctx, req, resp);
  }
  grpc::Status LeaseTask(grpc::ServerContext* ctx, const v1::LeaseTaskRequest* req,
                         v1::LeaseTaskResponse* resp) override {
    ++leases_in_flight_;
    const grpc::Status st = c_.load()->LeaseTask(ctx, req, resp);
    if (st.ok() && resp->has_task()) Granted(resp->lease_id());
    --leases_in_flight_;
    return st;
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    ++heartbeats_;
    if (drop_heartbeats_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "dropped by the test");
    return c_.load()->Heartbeat(ctx, req, resp);
  }
  grpc::Status ReportResult(grpc::ServerContext* ctx, const v1::ReportResultRequest* req,
                            v1::ReportResultResponse* resp) override {
    {
      absl::MutexLock l(&mu_);
      reported_.push_back(req->lease_id());
    }
    const grpc::Status st = c_.load()->ReportResult(ctx, req, resp);
    if (st.ok() && resp->next().has_task()) Granted(resp->next().lease_id());
    return st;
  }
  grpc::Status FetchKernelLibrary(grpc::ServerContext* ctx, const v1::FetchKernelLibraryRequest* req,
                                  grpc::ServerWriter<v1::FetchKernelLibraryResponse>* w) override {
    return c_.load()->FetchKernelLibrary(ctx, req, w);
  }

  std::vector<std::string> granted() const {
    absl::MutexLock l(&mu_);
    return granted_;
  }
  std::vector<std::string> reported() const {
    absl::MutexLock l(&mu_);
    return reported_;
  }
  int64_t heartbeats() const { return heartbeats_.load(); }
  int64_t registrations() const { return registrations_.load(); }
  int64_t leases_in_flight() const { return leases_in_flight_.load(); }
  // While set, every heartbeat fails as if the coordinator were unreachable.
  std::atomic<bool> drop_heartbeats_{false};

 private:
  void Granted(const std::string& lease) {
    absl::MutexLock l(&mu_);
    granted_.push_back(lease);
  }
  std::atomic<Coordinator*> c_;
  mutable absl::Mutex mu_;
  std::vector<std::string> granted_ ABSL_GUARDED_BY(mu_), reported_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> heartbeats_{0}, registrations_{0}, leases_in_flight_{0};
};

// Polls `done` until it holds; false after a generous bound (the bound only
// guards against a hang, it asserts nothing about speed).
bool Eventually(const std::function<bool()>& done, absl::Duration bound = absl::Seconds(60)) {
  const absl::Time until = absl::Now() + bound;
  while (!done()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

int ReadPid(const std::string& path) {
  std::ifstream f(path);
  int pid = 0;
  return f >> pid ? pid : 0;
}

// A worker steered by the coordinator (cancels, drain, lease length): the
// worker talks to the coordinator through RecordingWorkerService; leases
// last `lease` (3 s: heartbeats every second).
class WorkerSteeringTest : public ::testing::Test {
 protected:
  explicit WorkerSteeringTest(absl::Duration lease = absl::Seconds(3))
      : scheduler_(RealClock::Get(),
                   coordinator::WithFailurePredicate(coordinator::MakeSchedulerOptions(lease, 3, 10000))) {
    CoordinatorOptions& o = coordinator_options_;
    o.max_long_poll = absl::Milliseconds(300);
    o.lease_duration = lease;
    libraries_ = std::move(*coordinator::LibraryRegistry::Create(nullptr));
    o.libraries = libraries_.get();
    coordinator_ = std::make_unique<Coordinator>(RealClock::Get(), &scheduler_, o);
    service_ = std::make_unique<RecordingWorkerService>(coordinator_.get());
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
  }
  ~WorkerSteeringTest() override {
    if (server_) server_->Shutdown();
  }

  void SetUp() override { ASSERT_NE(server_, nullptr); }

  std::unique_ptr<Worker> NewWorker(std::vector<std::string> child_argv = {}) {
    WorkerOptions o;
    o.coordinator = "127.0.0.1:" + std::to_string(port_);
    o.worker_id = "w1";
    o.child_argv = child_argv.empty() ? RealChild() : child_argv;
    o.long_poll = absl::Milliseconds(300);
    o.task_timeout = absl::Seconds(600);
    o.metrics = &metrics_;
    auto w = Worker::Create(o);
    EXPECT_TRUE(w.ok()) << w.status();
    return std::move(*w);
  }
  static std::vector<std::string> RealChild() {
    return {MXVAL_BIN, "__run-task", "--kernel-dir", MXVAL_PLUGIN_DIR, "--threads", "1"};
  }

  // A one-M job: two tasks.
  std::string Submit() {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_presets("dsv3-tp8");
    req.mutable_spec()->set_no_layout_probes(true);
    req.mutable_spec()->add_m_values(1);
    req.mutable_spec()->set_repetitions(1);
    v1::SubmitJobResponse resp;
    grpc::ServerContext ctx;
    EXPECT_TRUE(coordinator_->SubmitJob(&ctx, &req, &resp).ok());
    return resp.job().job_id();
  }
  v1::Job Job(const std::string& id) { return *coordinator_->BuildJob(id, true); }
  bool Done(const std::string& id) { return Job(id).state() == v1::JOB_STATE_DONE; }

  double Abandoned(const std::string& reason) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != "mxval_worker_tasks_abandoned_total") continue;
      for (const auto& m : family.metric)
        for (const auto& label : m.label)
          if (label.name == "reason" && label.value == reason) return m.counter.value;
    }
    return 0;
  }

  prometheus::Registry registry_;
  WorkerMetrics metrics_{registry_};
  CoordinatorOptions coordinator_options_;
  Scheduler scheduler_;
  std::unique_ptr<coordinator::LibraryRegistry> libraries_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<RecordingWorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// A cancelled job's running task: the heartbeat names its lease lost, the
// child (a shell) and its grandchild (a sleep) are killed, nothing is
// reported for that lease, and the worker goes on to run the next job.
TEST_F(WorkerSteeringTest, CancelStopsTheRunningChildAndNothingIsReportedForIt) {
  const std::string dir = testing_util::PrivateDir();
  // The first task hangs (its pids written for the test); every later one
  // is the real task child.
  const std::string script = dir + "/child.sh";
  std::ofstream(script) << "#!/bin/sh\nif mkdir '" << dir << "/first' 2>/dev/null; then\n  cat >/dev/null\n"
                        << "  echo $$ > '" << dir << "/sh.pid'\n  sleep 600 &\n  echo $! > '" << dir
                        << "/sleep.pid'\n  wait\n  exit 0\nfi\nexec";
  for (const std::string& a : RealChild()) std::ofstream(script, std::ios::app) << " '" << a << "'";
  std::ofstream(script, std::ios::app) << " \"$@\"\n";
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  auto w = NewWorker({"/bin/sh", script});
  std::thread t([&] { EXPECT_TRUE(w->Run().ok()); });

  const std::string cancelled = Submit();
  int sh = 0, sleeper = 0;
  ASSERT_TRUE(Eventually([&] { return (sh = ReadPid(dir + "/sh.pid")) > 0 && (sleeper = ReadPid(dir + "/sleep.pid")) > 0; }));
  ASSERT_TRUE(testing_util::ProcessAlive(sh) && testing_util::ProcessAlive(sleeper));
  ASSERT_EQ(service_->granted().size(), 1u);
  const std::string lost = service_->granted()[0];
  {
    v1::CancelJobRequest req;
    req.set_job_id(cancelled);
    v1::CancelJobResponse resp;
    grpc::ServerContext ctx;
    ASSERT_TRUE(coordinator_->CancelJob(&ctx, &req, &resp).ok());
  }
  EXPECT_TRUE(Eventually([&] { return !testing_util::ProcessAlive(sh) && !testing_util::ProcessAlive(sleeper); })) << "the cancelled task's processes live on";
  EXPECT_TRUE(Eventually([&] { return w->tasks_abandoned() == 1; }));

  // The worker takes and completes the next job.
  const std::string next = Submit();
  ASSERT_TRUE(Eventually([&] { return Done(next); }));
  w->Drain();
  t.join();
  const v1::Job done = Job(next);
  ASSERT_EQ(done.results_size(), 2);
  for (const v1::TaskResult& r : done.results()) {
    EXPECT_EQ(r.candidate().accuracy().verdict(), v1::VERDICT_PASS) << r.candidate().accuracy().reason();
  }
  for (const std::string& lease : service_->reported()) EXPECT_NE(lease, lost) << "a result was reported for the lost lease";
  EXPECT_EQ(service_->reported().size(), 2u);
  EXPECT_EQ(w->tasks_abandoned(), 1);
  EXPECT_EQ(w->tasks_completed(), 2);
  EXPECT_EQ(w->infra_failures(), 0);
  EXPECT_EQ(Abandoned("lost"), 1);
  EXPECT_EQ(Job(cancelled).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Job(cancelled).results_size(), 0);
}

// `mxval drain`: the worker finishes, leases nothing and keeps heartbeating
// (Run() does not return); undrained, it runs the queued job; only Drain()
// (SIGTERM) ends it.
TEST_F(WorkerSteeringTest, CoordinatorDrainKeepsTheWorkerRunningIdleUntilUndrained) {
  auto w = NewWorker();
  std::atomic<bool> returned{false};
  std::thread t([&] {
    EXPECT_TRUE(w->Run().ok());
    returned = true;
  });
  ASSERT_TRUE(Eventually([&] { return service_->registrations() > 0; }));
  auto drain = [&](bool undrain) {
    v1::DrainWorkerRequest req;
    req.set_worker_id("w1");
    req.set_undrain(undrain);
    v1::DrainWorkerResponse resp;
    grpc::ServerContext ctx;
    ASSERT_TRUE(coordinator_->DrainWorker(&ctx, &req, &resp).ok());
  };
  drain(false);
  ASSERT_TRUE(Eventually([&] { return w->drained_by_coordinator(); }));
  // A long poll that began before the drain may still be waiting; after it
  // ends, the drained worker asks for nothing.
  ASSERT_TRUE(Eventually([&] { return service_->leases_in_flight() == 0; }));
  const std::string job = Submit();
  const int64_t beats = service_->heartbeats();
  ASSERT_TRUE(Eventually([&] { return service_->heartbeats() >= beats + 3; }));  // alive and heartbeating
  EXPECT_FALSE(returned.load());
  EXPECT_TRUE(service_->granted().empty());
  EXPECT_EQ(Job(job).progress().tasks_done(), 0);
  EXPECT_EQ(Job(job).state(), v1::JOB_STATE_QUEUED);

  drain(true);
  ASSERT_TRUE(Eventually([&] { return Done(job); }));
  EXPECT_FALSE(w->drained_by_coordinator());
  EXPECT_FALSE(returned.load());
  w->Drain();
  t.join();
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(w->tasks_completed(), 2);
}

// A result the coordinator does not accept (the lease expired while the
// heartbeats did not get through) is dropped, not retried, and counted; the
// task runs again and is recorded once.
TEST_F(WorkerSteeringTest, AResultNotAcceptedIsDroppedAndTheTaskRunsAgain) {
  const std::string dir = testing_util::PrivateDir();
  const std::string script = dir + "/child.sh";
  // The first task outlives its 3 s lease; later ones run at once.
  std::ofstream(script) << "#!/bin/sh\nif mkdir '" << dir << "/first' 2>/dev/null; then sleep 6; fi\nexec";
  for (const std::string& a : RealChild()) std::ofstream(script, std::ios::app) << " '" << a << "'";
  std::ofstream(script, std::ios::app) << " \"$@\"\n";
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  service_->drop_heartbeats_ = true;
  auto w = NewWorker({"/bin/sh", script});
  std::thread t([&] { EXPECT_TRUE(w->Run().ok()); });
  const std::string job = Submit();
  ASSERT_TRUE(Eventually([&] { return w->tasks_abandoned() == 1; }));
  service_->drop_heartbeats_ = false;
  ASSERT_TRUE(Eventually([&] { return Done(job); }, absl::Seconds(120)));
  w->Drain();
  t.join();
  EXPECT_EQ(Abandoned("not_accepted"), 1);
  EXPECT_EQ(Abandoned("lost"), 0);
  const v1::Job done = Job(job);
  ASSERT_EQ(done.results_size(), 2);
  for (const v1::TaskResult& r : done.results()) {
    EXPECT_EQ(r.candidate().accuracy().verdict(), v1::VERDICT_PASS) << r.candidate().accuracy().reason();
  }
  const std::vector<std::string> granted = service_->granted(), reported = service_->reported();
  EXPECT_EQ(reported.size(), 3u);  // the refused one, reported once, and the two recorded
  EXPECT_EQ(std::count(reported.begin(), reported.end(), granted[0]), 1) << "the refused report was retried";
  EXPECT_EQ(w->tasks_completed(), 2);
}

// A coordinator that forgot the worker (restarted: the same scheduler
// state, no registrations) refuses its heartbeats as unregistered; the worker
// registers again and runs the next job.
TEST_F(WorkerSteeringTest, AWorkerTheCoordinatorForgotRegistersAgain) {
  auto w = NewWorker();
  std::thread t([&] { EXPECT_TRUE(w->Run().ok()); });
  ASSERT_TRUE(Eventually([&] { return service_->registrations() == 1; }));
  auto restarted = std::make_unique<Coordinator>(RealClock::Get(), &scheduler_, coordinator_options_);
  service_->Use(restarted.get());
  ASSERT_TRUE(Eventually([&] { return service_->registrations() >= 2; }));
  coordinator_.swap(restarted);  // Submit and Job ask the new one
  const std::string job = Submit();
  ASSERT_TRUE(Eventually([&] { return Done(job); }));
  w->Drain();
  t.join();
  EXPECT_EQ(w->tasks_completed(), 2);
}

// A 2 s lease: heartbeats every 2/3 s at most (the coordinator's own
// interval is 5 s), so a task that runs longer than the lease keeps it and
// reports once.
class ShortLeaseTest : public WorkerSteeringTest {
 protected:
  ShortLeaseTest() : WorkerSteeringTest(absl::Seconds(2)) {}
};

TEST_F(ShortLeaseTest, HeartbeatsFollowTheLeaseLength) {
  const std::string dir = testing_util::PrivateDir();
  const std::string script = dir + "/child.sh";
  std::ofstream(script) << "#!/bin/sh\nsleep 5\nexec";  // the task outlives two leases
  for (const std::string& a : RealChild()) std::ofstream(script, std::ios::app) << " '" << a << "'";
  std::ofstream(script, std::ios::app) << " \"$@\"\n";
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  auto w = NewWorker({"/bin/sh", script});
  std::thread t([&] { EXPECT_TRUE(w->Run().ok()); });
  // The proxy counts the registration when it arrives, before the worker has
  // read the answer: wait for the interval the answer sets.
  EXPECT_TRUE(Eventually([&] { return w->heartbeat_interval() <= absl::Milliseconds(667); }))
      << w->heartbeat_interval();
  EXPECT_GT(w->heartbeat_interval(), absl::ZeroDuration());
  const std::string job = Submit();
  ASSERT_TRUE(Eventually([&] { return Done(job); }, absl::Seconds(120)));
  w->Drain();
  t.join();
  const v1::Job done = Job(job);
  ASSERT_EQ(done.results_size(), 2);
  for (const v1::TaskResult& r : done.results()) EXPECT_EQ(r.attempts_size(), 1);  // no lease expired
  EXPECT_EQ(w->tasks_abandoned(), 0);
  EXPECT_EQ(service_->granted().size(), 2u);
}

}  // namespace
}  // namespace mxval::worker
