// One in-process coordinator server on 127.0.0.1:0 and real gRPC clients.
#include "service/coordinator/coordinator_service.h"

#include <sqlite3.h>

#include <cstdio>
#include <functional>
#include <thread>

#include "grpcpp/generic/generic_stub.h"
#include <set>

#include "common/digest.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "service/coordinator/request_bounds.h"
#include "service/coordinator/sqlite_store.h"


namespace mxval::coordinator {
namespace {

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.max_long_poll = absl::Milliseconds(200);
    o.max_list_page_bytes = 1024;  // a few jobs per page: paging is exercised
    o.log = [this](const std::string& line) {
      absl::MutexLock l(&log_mu_);
      log_.push_back(line);
    };
    coordinator_ = std::make_unique<Coordinator>(&clock_, &scheduler_, o);
    int port = 0;
    server_ = StartServer("127.0.0.1:0", coordinator_.get(), &port);
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
    jobs_ = v1::ValidationService::NewStub(channel);
    workers_ = v1::WorkerService::NewStub(channel);
    admin_ = v1::AdminService::NewStub(channel);
    channel_ = channel;
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration d = absl::Seconds(10)) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d));
    return c;
  }

  v1::JobSpec Spec(int ms = 2) {
    v1::JobSpec s;
    s.set_name("test-job");
    s.add_presets("dsv3-tp8");
    s.set_no_layout_probes(true);
    for (int i = 0; i < ms; ++i) s.add_m_values(1 + i);
    return s;
  }

  void Register(const std::string& id) {
    v1::RegisterWorkerRequest req;
    req.set_worker_id(id);
    v1::DeviceInfo* d = req.mutable_capabilities()->add_devices();
    d->set_arch("cpu");
    d->set_healthy(true);
    v1::RegisterWorkerResponse resp;
    ASSERT_TRUE(workers_->RegisterWorker(Ctx().get(), req, &resp).ok());
  }

  // Leases one task as `worker` and reports a passing result.
  bool WorkOne(const std::string& worker) {
    v1::LeaseTaskRequest lr;
    lr.set_worker_id(worker);
    lr.mutable_max_wait()->set_nanos(100'000'000);
    v1::LeaseTaskResponse lease;
    if (!workers_->LeaseTask(Ctx().get(), lr, &lease).ok() || !lease.has_task()) return false;
    v1::ReportResultRequest rr;
    rr.set_worker_id(worker);
    rr.set_lease_id(lease.lease_id());
    v1::TaskResult* r = rr.mutable_result();
    r->set_task_id(lease.task().task_id());
    *r->mutable_shape() = lease.task().shape();
    r->set_m(lease.task().m());
    r->mutable_baseline()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    r->mutable_candidate()->mutable_accuracy()->set_verdict(lease.task().m() != 2 ? v1::VERDICT_PASS
                                                            : decline_m2_         ? v1::VERDICT_ERROR
                                                                                  : v1::VERDICT_FAIL_MISMATCH);
    r->mutable_candidate()->set_declined(decline_m2_ && lease.task().m() == 2);
    v1::ReportResultResponse resp;
    return workers_->ReportResult(Ctx().get(), rr, &resp).ok() && resp.accepted();
  }

  std::vector<std::string> Log() {
    absl::MutexLock l(&log_mu_);
    return log_;
  }
  v1::LeaseTaskResponse Lease(const std::string& worker, int device = 0) {
    v1::LeaseTaskRequest lr;
    lr.set_worker_id(worker);
    lr.set_device_index(device);
    v1::LeaseTaskResponse lease;
    EXPECT_TRUE(workers_->LeaseTask(Ctx().get(), lr, &lease).ok());
    return lease;
  }
  grpc::Status Report(const std::string& worker, const std::string& lease_id, const std::string& task_id,
                      v1::Verdict verdict, v1::ReportResultResponse* resp) {
    v1::ReportResultRequest rr;
    rr.set_worker_id(worker);
    rr.set_lease_id(lease_id);
    rr.mutable_result()->set_task_id(task_id);
    rr.mutable_result()->mutable_baseline()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    rr.mutable_result()->mutable_candidate()->mutable_accuracy()->set_verdict(verdict);
    return workers_->ReportResult(Ctx().get(), rr, resp);
  }

  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
  bool decline_m2_ = false;  // WorkOne: the M=2 candidates are declined by can_implement, not failed
  FakeClock clock_;
  Scheduler scheduler_{&clock_, WithFailurePredicate(MakeSchedulerOptions(absl::Seconds(30), 3, 10000))};
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ValidationService::Stub> jobs_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::shared_ptr<grpc::Channel> channel_;
};

// grpc.health.v1.Health/Check over the wire. Debian ships no generated
// health stubs, so this speaks the (tiny) message format directly: an empty
// HealthCheckRequest, and a response whose field 1 is SERVING (1): 08 01.
TEST_F(CoordinatorServiceTest, HealthIsServing) {
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  auto ctx = Ctx();
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  auto call = stub.PrepareUnaryCall(ctx.get(), "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status st;
  call->Finish(&response, &st, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(ok);
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(CoordinatorServiceTest, BadSpecsAreInvalidArgumentAndStoreNothing) {
  struct Case { std::function<void(v1::JobSpec&)> mutate; const char* field; } cases[] = {
      {[](v1::JobSpec& s) { s.clear_presets(); }, "spec.shapes"},
      {[](v1::JobSpec& s) {
         s.clear_presets();
         v1::Shape* sh = s.add_shapes();
         sh->set_op(v1::OP_KUP);
         sh->set_b(16);
         sh->set_n(512);
         sh->set_k(100);
       }, "spec.shapes[0].k"},
      {[](v1::JobSpec& s) { s.mutable_baseline_kernel()->set_library("nope"); }, "spec.baseline_kernel.library"},
      {[](v1::JobSpec& s) { s.add_m_values(1 << 30); }, "spec.m_values[2]"},
  };
  for (const Case& c : cases) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    c.mutate(*req.mutable_spec());
    v1::SubmitJobResponse resp;
    const grpc::Status st = jobs_->SubmitJob(Ctx().get(), req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_EQ(st.error_message().rfind(c.field, 0), 0u) << st.error_message();
  }
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(Ctx().get(), v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
  EXPECT_EQ(scheduler_.QueuedTasks(), 0);
}

// A side its kernel's can_implement declined is an ERROR by a deterministic
// decision: final at once, not re-run to verify like a failing run.
TEST_F(CoordinatorServiceTest, DeclinedSidesAreNotReRun) {
  Register("w1");
  decline_m2_ = true;
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec();
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());
  int done = 0;
  while (WorkOne("w1")) ++done;
  EXPECT_EQ(done, 4);
  v1::GetJobRequest g;
  g.set_job_id(sub.job().job_id());
  g.set_include_results(true);
  v1::Job job;
  ASSERT_TRUE(jobs_->GetJob(Ctx().get(), g, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_DONE);
  ASSERT_EQ(job.results_size(), 4);
  for (const v1::TaskResult& r : job.results()) {
    EXPECT_EQ(r.attempts_size(), 1) << "m=" << r.m();
    EXPECT_EQ(r.candidate().declined(), r.m() == 2);
  }
}

TEST_F(CoordinatorServiceTest, SubmitWorkWatchAndGet) {
  Register("w1");
  v1::SubmitJobRequest req;
  req.set_request_id("ci-123");
  *req.mutable_spec() = Spec();
  v1::SubmitJobResponse sub, again;
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &again).ok());
  EXPECT_EQ(sub.job().job_id(), again.job().job_id());  // idempotent retry
  EXPECT_EQ(sub.job().progress().tasks_total(), 4);     // (kup, vup) x M in {1, 2}
  EXPECT_EQ(sub.job().state(), v1::JOB_STATE_QUEUED);

  // Watch in the background while a worker completes the tasks.
  std::vector<v1::JobEvent> events;
  std::thread watcher([&] {
    auto ctx = Ctx();
    v1::WatchJobRequest w;
    w.set_job_id(sub.job().job_id());
    auto reader = jobs_->WatchJob(ctx.get(), w);
    v1::JobEvent ev;
    while (reader->Read(&ev)) events.push_back(ev);
    EXPECT_TRUE(reader->Finish().ok());
  });
  int done = 0;
  while (WorkOne("w1")) ++done;
  // The two failing tasks were re-queued once to verify them; with one
  // worker, it may take them again after the retry-elsewhere grace.
  EXPECT_EQ(done, 4);
  clock_.Advance(absl::Seconds(6));
  while (WorkOne("w1")) ++done;
  watcher.join();
  EXPECT_EQ(done, 6);
  int results = 0;
  for (const auto& e : events) results += e.has_result();
  EXPECT_EQ(results, 4);
  EXPECT_EQ(events.back().job().state(), v1::JOB_STATE_DONE);

  v1::GetJobRequest g;
  g.set_job_id(sub.job().job_id());
  g.set_include_results(true);
  v1::Job job;
  ASSERT_TRUE(jobs_->GetJob(Ctx().get(), g, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_DONE);
  EXPECT_EQ(job.results_size(), 4);
  EXPECT_EQ(job.progress().tasks_failed(), 2);  // the M=2 candidates
  EXPECT_EQ(job.spec().name(), "test-job");
  for (const v1::TaskResult& r : job.results()) {
    const bool failing = r.candidate().accuracy().verdict() != v1::VERDICT_PASS;
    ASSERT_EQ(r.attempts_size(), failing ? 2 : 1);
    EXPECT_EQ(r.attempts(0).worker_id(), "w1");
    // Same tables on both sides: a candidate-only failure is on an untouched path.
    EXPECT_EQ(r.triage().triage_class(), failing ? v1::TRIAGE_CLASS_UNTOUCHED_FAILURE : v1::TRIAGE_CLASS_PASS)
        << r.triage().reason();
    if (failing) {
      EXPECT_EQ(r.triage().first_candidate().accuracy().verdict(), v1::VERDICT_FAIL_MISMATCH);
      EXPECT_FALSE(r.triage().evidence().empty());
    }
  }
  g.set_job_id("job-999");
  EXPECT_EQ(jobs_->GetJob(Ctx().get(), g, &job).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(CoordinatorServiceTest, LeasesNeedRegistrationAndLostLeasesAreReported) {
  v1::LeaseTaskRequest lr;
  lr.set_worker_id("ghost");
  v1::LeaseTaskResponse lease;
  EXPECT_EQ(workers_->LeaseTask(Ctx().get(), lr, &lease).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  Register("w1");
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(1);
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());
  lr.set_worker_id("w1");
  ASSERT_TRUE(workers_->LeaseTask(Ctx().get(), lr, &lease).ok());
  ASSERT_TRUE(lease.has_task());
  EXPECT_FALSE(lease.task().task_id().empty());
  EXPECT_EQ(lease.task().baseline_kernel().library(), "mxval-builtin-cpu");
  // Cancel the job: the next heartbeat tells the worker its lease is lost.
  v1::CancelJobRequest cr;
  cr.set_job_id(sub.job().job_id());
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(jobs_->CancelJob(Ctx().get(), cr, &cancelled).ok());
  EXPECT_EQ(cancelled.job().state(), v1::JOB_STATE_CANCELLED);
  v1::HeartbeatRequest hb;
  hb.set_worker_id("w1");
  hb.add_lease_ids(lease.lease_id());
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(workers_->Heartbeat(Ctx().get(), hb, &hr).ok());
  ASSERT_EQ(hr.lost_lease_ids_size(), 1);
  // A late report is answered "not accepted", not an error.
  v1::ReportResultRequest rr;
  rr.set_worker_id("w1");
  rr.set_lease_id(lease.lease_id());
  rr.mutable_result()->set_task_id(lease.task().task_id());
  v1::ReportResultResponse rresp;
  ASSERT_TRUE(workers_->ReportResult(Ctx().get(), rr, &rresp).ok());
  EXPECT_FALSE(rresp.accepted());
}

TEST_F(CoordinatorServiceTest, DrainStopsLeasing) {
  Register("w1");
  v1::DrainWorkerRequest dr;
  dr.set_worker_id("w1");
  v1::DrainWorkerResponse dresp;
  ASSERT_TRUE(admin_->DrainWorker(Ctx().get(), dr, &dresp).ok());
  EXPECT_EQ(dresp.worker().state(), v1::WORKER_STATE_DRAINING);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(1);
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());
  EXPECT_FALSE(WorkOne("w1"));
  dr.set_undrain(true);
  ASSERT_TRUE(admin_->DrainWorker(Ctx().get(), dr, &dresp).ok());
  EXPECT_TRUE(WorkOne("w1"));
  v1::ListWorkersResponse lw;
  ASSERT_TRUE(admin_->ListWorkers(Ctx().get(), v1::ListWorkersRequest(), &lw).ok());
  ASSERT_EQ(lw.workers_size(), 1);
  EXPECT_EQ(lw.workers(0).state(), v1::WORKER_STATE_ACTIVE);
  dr.set_worker_id("nobody");
  EXPECT_EQ(admin_->DrainWorker(Ctx().get(), dr, &dresp).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Report-and-lease in one call: each report hands out the next task; the
// last report gets none; a draining worker gets none.
TEST_F(CoordinatorServiceTest, ReportCanLeaseTheNextTask) {
  Register("w1");
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(3);  // 2 shapes x 3 M = 6 tasks
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());
  const int total = sub.job().progress().tasks_total();
  ASSERT_EQ(total, 6);
  v1::LeaseTaskRequest lr;
  lr.set_worker_id("w1");
  v1::LeaseTaskResponse lease;
  ASSERT_TRUE(workers_->LeaseTask(Ctx().get(), lr, &lease).ok());
  std::set<std::string> seen;
  int reports = 0;
  while (lease.has_task()) {
    ASSERT_TRUE(seen.insert(lease.task().task_id()).second) << "task handed out twice";
    v1::ReportResultRequest rr;
    rr.set_worker_id("w1");
    rr.set_lease_id(lease.lease_id());
    rr.mutable_result()->set_task_id(lease.task().task_id());
    rr.mutable_result()->mutable_baseline()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    rr.mutable_result()->mutable_candidate()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    rr.mutable_next();
    v1::ReportResultResponse resp;
    ASSERT_TRUE(workers_->ReportResult(Ctx().get(), rr, &resp).ok());
    EXPECT_TRUE(resp.accepted());
    ++reports;
    lease = resp.next();
  }
  EXPECT_EQ(reports, total);
  v1::GetJobRequest g;
  g.set_job_id(sub.job().job_id());
  v1::Job job;
  ASSERT_TRUE(jobs_->GetJob(Ctx().get(), g, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_DONE);
  EXPECT_EQ(job.progress().tasks_failed(), 0);
  EXPECT_EQ(job.results_size(), 0);  // not asked for

  // Draining: the report is recorded, no next lease.
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());  // same spec, new job (no request id)
  ASSERT_TRUE(workers_->LeaseTask(Ctx().get(), lr, &lease).ok());
  ASSERT_TRUE(lease.has_task());
  v1::DrainWorkerRequest dr;
  dr.set_worker_id("w1");
  v1::DrainWorkerResponse dresp;
  ASSERT_TRUE(admin_->DrainWorker(Ctx().get(), dr, &dresp).ok());
  v1::ReportResultRequest rr;
  rr.set_worker_id("w1");
  rr.set_lease_id(lease.lease_id());
  rr.mutable_result()->set_task_id(lease.task().task_id());
  rr.mutable_result()->mutable_baseline()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
  rr.mutable_result()->mutable_candidate()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
  rr.mutable_next();
  v1::ReportResultResponse resp;
  ASSERT_TRUE(workers_->ReportResult(Ctx().get(), rr, &resp).ok());
  EXPECT_TRUE(resp.accepted());
  EXPECT_FALSE(resp.next().has_task());
}

TEST_F(CoordinatorServiceTest, TriageLogsOverTheWire) {
  auto triage = v1::TriageService::NewStub(channel_);
  v1::TriageLogsRequest req;
  v1::TriageLogsResponse resp;
  EXPECT_EQ(triage->TriageLogs(Ctx().get(), req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req.add_changed_files("kernels/gpu/a16wfp4_gpu.cu");
  req.set_diff(
      "diff --git a/python/pkg/ops/mxfp4.py b/python/pkg/ops/mxfp4.py\n--- a/python/pkg/ops/mxfp4.py\n"
      "+++ b/python/pkg/ops/mxfp4.py\n@@ -1,1 +1,2 @@ def _mxfp4_gemm_kernel(x):\n     pid = 0\n+    off = 1\n");
  v1::CiJobLog* j = req.add_jobs();
  j->set_name("gpu-kernel-tests");
  j->set_log(
      "Traceback (most recent call last):\n  File \"/venv/site-packages/pkg/ops/mxfp4.py\", line 2, in "
      "_mxfp4_gemm_kernel\nIndexError: out of range\n");
  j->set_base_log("all passed\n");
  v1::CiJobLog* k = req.add_jobs();
  k->set_name("nightly");
  k->set_log("RuntimeError: No HIP GPUs are available\n\xff\xfe");
  ASSERT_TRUE(triage->TriageLogs(Ctx().get(), req, &resp).ok());
  ASSERT_EQ(resp.jobs_size(), 2);
  // No map is configured: the frame in the diff's file and its changed kernel are the evidence.
  EXPECT_EQ(resp.jobs(0).triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << resp.jobs(0).reason();
  ASSERT_GT(resp.jobs(0).evidence_size(), 0);
  EXPECT_EQ(resp.jobs(0).evidence(0).changed_file(), "python/pkg/ops/mxfp4.py");
  EXPECT_EQ(resp.jobs(0).confidence(), v1::TRIAGE_CONFIDENCE_HIGH);
  EXPECT_EQ(resp.jobs(1).triage_class(), v1::TRIAGE_CLASS_INFRA) << resp.jobs(1).reason();
  EXPECT_EQ(resp.jobs(1).rule(), "gpu-not-detected");
  req.set_diff("not a diff");
  const grpc::Status bad = triage->TriageLogs(Ctx().get(), req, &resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("diff"), std::string::npos) << bad.error_message();
}

TEST_F(CoordinatorServiceTest, ListJobsPages) {
  for (int i = 0; i < 5; ++i) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(1);
    v1::SubmitJobResponse sub;
    ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());
  }
  v1::ListJobsRequest lr;
  lr.set_page_size(2);
  int seen = 0;
  std::string token;
  do {
    lr.set_page_token(token);
    v1::ListJobsResponse resp;
    ASSERT_TRUE(jobs_->ListJobs(Ctx().get(), lr, &resp).ok());
    seen += resp.jobs_size();
    token = resp.next_page_token();
  } while (!token.empty());
  EXPECT_EQ(seen, 5);
  lr.set_page_token("garbage");
  v1::ListJobsResponse resp;
  EXPECT_EQ(jobs_->ListJobs(Ctx().get(), lr, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Only the holder of a lease can renew it or report its result, and only for
// the leased task; lease ids are unguessable. Forged reports change nothing:
// the holder's real result is the one recorded.
TEST_F(CoordinatorServiceTest, OnlyTheLeaseHolderReports) {
  Register("w1");
  Register("w2");
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(1);  // 2 tasks
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());
  const v1::LeaseTaskResponse lease = Lease("w1");
  ASSERT_TRUE(lease.has_task());
  const v1::LeaseTaskResponse other = Lease("w2");
  ASSERT_TRUE(other.has_task());
  // "lease-<n>-<32 hex digits>": 128 random bits per lease.
  for (const std::string& id : {lease.lease_id(), other.lease_id()}) {
    const std::string secret = id.substr(id.rfind('-') + 1);
    EXPECT_EQ(secret.size(), 32u) << id;
    EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  }
  EXPECT_NE(lease.lease_id().substr(lease.lease_id().rfind('-')), other.lease_id().substr(other.lease_id().rfind('-')));

  v1::ReportResultResponse resp;
  // A caller that never registered, with a forged pass.
  grpc::Status st = Report("mallory", lease.lease_id(), lease.task().task_id(), v1::VERDICT_PASS, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  // A registered worker on another worker's lease.
  st = Report("w2", lease.lease_id(), lease.task().task_id(), v1::VERDICT_PASS, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  // The holder, naming another task (w2's) on its lease.
  st = Report("w1", lease.lease_id(), other.task().task_id(), v1::VERDICT_PASS, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("result.task_id"), std::string::npos) << st.error_message();
  // w2's heartbeat naming w1's lease neither renews it nor loses it for w1.
  v1::HeartbeatRequest hb;
  hb.set_worker_id("w2");
  hb.add_lease_ids(lease.lease_id());
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(workers_->Heartbeat(Ctx().get(), hb, &hr).ok());
  EXPECT_EQ(hr.lost_lease_ids_size(), 1);
  hb.set_worker_id("w1");
  ASSERT_TRUE(workers_->Heartbeat(Ctx().get(), hb, &hr).ok());
  EXPECT_EQ(hr.lost_lease_ids_size(), 0);
  // An unregistered caller's heartbeat and lease poll are refused too.
  hb.set_worker_id("mallory");
  EXPECT_EQ(workers_->Heartbeat(Ctx().get(), hb, &hr).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // The holder's real (failing) result is what the job records.
  ASSERT_TRUE(Report("w1", lease.lease_id(), lease.task().task_id(), v1::VERDICT_FAIL_MISMATCH, &resp).ok());
  EXPECT_TRUE(resp.accepted());
  auto t = scheduler_.GetTask(lease.task().task_id());
  ASSERT_TRUE(t.ok());
  v1::TaskResult recorded;
  ASSERT_TRUE(recorded.ParseFromString(t->first_result.empty() ? t->result : t->first_result));
  EXPECT_EQ(recorded.candidate().accuracy().verdict(), v1::VERDICT_FAIL_MISMATCH);
  ASSERT_EQ(t->attempts.size(), 1u);
  EXPECT_EQ(t->attempts[0].worker_id, "w1");
  // Every refusal was logged with its reason.
  const std::vector<std::string> log = Log();
  int unregistered = 0, not_held = 0, mismatch = 0;
  for (const std::string& line : log) {
    unregistered += line.find("(unregistered_worker)") != std::string::npos;
    not_held += line.find("(lease_not_held_by_caller)") != std::string::npos;
    mismatch += line.find("(result_task_mismatch)") != std::string::npos;
  }
  EXPECT_EQ(unregistered, 2);
  EXPECT_EQ(not_held, 2);  // w2's report and w2's heartbeat
  EXPECT_EQ(mismatch, 1);
}

TEST_F(CoordinatorServiceTest, LeaseOnlyForRegisteredDevices) {
  Register("w1");  // device 0
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(1);
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());
  v1::LeaseTaskRequest lr;
  lr.set_worker_id("w1");
  lr.set_device_index(3);
  v1::LeaseTaskResponse lease;
  const grpc::Status st = workers_->LeaseTask(Ctx().get(), lr, &lease);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();  // a stale registration registers again
  EXPECT_NE(st.error_message().find("device_index: 3"), std::string::npos) << st.error_message();
  EXPECT_FALSE(lease.has_task());
  EXPECT_TRUE(Lease("w1", 0).has_task());
}

TEST_F(CoordinatorServiceTest, RegistrationsAreBounded) {
  const auto try_register = [&](const std::function<void(v1::RegisterWorkerRequest&)>& edit) {
    v1::RegisterWorkerRequest req;
    req.set_worker_id("w1");
    v1::DeviceInfo* d = req.mutable_capabilities()->add_devices();
    d->set_arch("sm_90a");
    d->set_healthy(true);
    edit(req);
    v1::RegisterWorkerResponse resp;
    return workers_->RegisterWorker(Ctx().get(), req, &resp);
  };
  const std::vector<std::pair<std::function<void(v1::RegisterWorkerRequest&)>, std::string>> bad = {
      {[](auto& r) { r.mutable_capabilities()->mutable_devices(0)->set_arch(""); }, "capabilities.devices[0].arch"},
      {[](auto& r) { r.mutable_capabilities()->mutable_devices(0)->set_arch("SM 90"); }, "capabilities.devices[0].arch"},
      {[](auto& r) { r.mutable_capabilities()->mutable_devices(0)->set_index(-1); }, "capabilities.devices[0].index"},
      {[](auto& r) { *r.mutable_capabilities()->add_devices() = r.capabilities().devices(0); },
       "capabilities.devices[1].index"},
      {[](auto& r) { r.set_worker_id("\x1b[2Jevil"); }, "worker_id"},
      {[](auto& r) { r.set_worker_id(std::string(300, 'w')); }, "worker_id"},
      {[](auto& r) { r.mutable_capabilities()->set_hostname("host\xc2\x9b" "1"); }, "capabilities.hostname"},
      {[](auto& r) {
         for (int i = 1; i <= kMaxWorkerDevices; ++i) {
           v1::DeviceInfo* d = r.mutable_capabilities()->add_devices();
           d->set_index(i);
           d->set_arch("cpu");
         }
       },
       "capabilities.devices"},
      {[](auto& r) { r.mutable_capabilities()->clear_devices(); }, "capabilities.devices"},
  };
  for (const auto& [edit, field] : bad) {
    const grpc::Status st = try_register(edit);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_EQ(st.error_message().rfind(field + ":", 0), 0u) << st.error_message();
  }
  v1::ListWorkersResponse lw;
  ASSERT_TRUE(admin_->ListWorkers(Ctx().get(), v1::ListWorkersRequest(), &lw).ok());
  EXPECT_EQ(lw.workers_size(), 0);  // nothing half-registered
  EXPECT_TRUE(try_register([](auto&) {}).ok());
}

// Heartbeats come at least three times per lease, however short the lease.
TEST(CoordinatorHeartbeat, FollowsTheLeaseLength) {
  FakeClock clock;
  Scheduler scheduler(&clock, SchedulerOptions{});
  CoordinatorOptions o;
  o.lease_duration = absl::Milliseconds(1500);
  Coordinator c(&clock, &scheduler, o);
  v1::RegisterWorkerRequest req;
  req.set_worker_id("w");
  req.mutable_capabilities()->add_devices()->set_arch("cpu");
  v1::RegisterWorkerResponse resp;
  ASSERT_TRUE(c.RegisterWorker(nullptr, &req, &resp).ok());
  EXPECT_EQ(resp.heartbeat_interval().seconds(), 0);
  EXPECT_EQ(resp.heartbeat_interval().nanos(), 500'000'000);
}

// A request id belongs to its request: a retry with another spec is an error
// naming the difference, not a silent return of the first job.
TEST_F(CoordinatorServiceTest, RequestIdRetryWithAnotherSpecIsRefused) {
  v1::SubmitJobRequest req;
  req.set_request_id("pr-7-run-1");
  *req.mutable_spec() = Spec(1);
  v1::SubmitJobResponse first, again;
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &first).ok());
  ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &again).ok());
  EXPECT_EQ(again.job().job_id(), first.job().job_id());
  EXPECT_EQ(again.job().request_id(), "pr-7-run-1");  // as the client sent it
  req.mutable_spec()->set_name("another-job");
  const grpc::Status st = jobs_->SubmitJob(Ctx().get(), req, &again);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(st.error_message().find("name"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find(first.job().job_id()), std::string::npos) << st.error_message();
}

TEST(RequestKeys, ArePerOwner) {
  EXPECT_NE(RequestKey("ci-bot-a", "r1"), RequestKey("ci-bot-b", "r1"));
  EXPECT_EQ(ClientRequestId(RequestKey("ci-bot-a", "r1")), "r1");
  EXPECT_EQ(RequestKey("ci-bot-a", ""), "");
  EXPECT_EQ(ClientRequestId("legacy-id"), "legacy-id");
}

// Pages end by size as well as count, and chain through every job.
TEST_F(CoordinatorServiceTest, ListJobsPagesBySize) {
  std::set<std::string> submitted;
  for (int i = 0; i < 7; ++i) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(1);
    req.mutable_spec()->set_name(absl::StrCat("job-", i, std::string(250, 'x')));
    v1::SubmitJobResponse sub;
    ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &sub).ok());
    submitted.insert(sub.job().job_id());
  }
  std::set<std::string> listed;
  v1::ListJobsRequest lr;
  lr.set_page_size(500);
  int pages = 0;
  do {
    v1::ListJobsResponse page;
    ASSERT_TRUE(jobs_->ListJobs(Ctx().get(), lr, &page).ok());
    ASSERT_GT(page.jobs_size(), 0);
    EXPECT_TRUE(page.jobs_size() == 1 || page.ByteSizeLong() <= 1024) << page.ByteSizeLong();
    for (const v1::Job& j : page.jobs()) EXPECT_TRUE(listed.insert(j.job_id()).second) << j.job_id();
    lr.set_page_token(page.next_page_token());
    if (++pages == 1) {  // a job submitted between pages shifts nothing
      v1::SubmitJobRequest late;
      *late.mutable_spec() = Spec(1);
      v1::SubmitJobResponse sub;
      ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), late, &sub).ok());
    }
  } while (!lr.page_token().empty() && pages < 20);
  EXPECT_EQ(listed, submitted);
  EXPECT_GT(pages, 1);
}

}  // namespace
}  // namespace mxval::coordinator

namespace mxval::coordinator {
namespace {

v1::SubmitJobRequest LimitJob(const std::string& request_id) {
  v1::SubmitJobRequest req;
  req.set_request_id(request_id);
  req.mutable_spec()->add_presets("dsv3-tp8");
  req.mutable_spec()->set_no_layout_probes(true);
  req.mutable_spec()->add_m_values(1);
  return req;
}

TEST(SubmitLimits, InflightJobsPerClient) {
  FakeClock clock;
  Scheduler scheduler(&clock, WithFailurePredicate(SchedulerOptions{}));
  CoordinatorOptions o;
  o.max_inflight_jobs_per_client = 1;
  Coordinator c(&clock, &scheduler, o);
  grpc::ServerContext ctx;
  v1::SubmitJobResponse a, b;
  const v1::SubmitJobRequest ra = LimitJob("a");
  ASSERT_TRUE(c.SubmitJob(&ctx, &ra, &a).ok());
  const v1::SubmitJobRequest rb = LimitJob("b");
  grpc::ServerContext ctx_b;
  const grpc::Status st = c.SubmitJob(&ctx_b, &rb, &b);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("limit 1"), std::string::npos) << st.error_message();
  // A retry of the accepted job is not a new job: never refused.
  v1::SubmitJobResponse again;
  ASSERT_TRUE(c.SubmitJob(&ctx, &ra, &again).ok());
  EXPECT_EQ(again.job().job_id(), a.job().job_id());
  // Once the first job is final, the client may submit again.
  v1::CancelJobRequest cr;
  cr.set_job_id(a.job().job_id());
  v1::CancelJobResponse cresp;
  ASSERT_TRUE(c.CancelJob(&ctx, &cr, &cresp).ok());
  EXPECT_TRUE(c.SubmitJob(&ctx, &rb, &b).ok());
}

TEST(SubmitLimits, RatePerClientWithRetryHint) {
  FakeClock clock;
  Scheduler scheduler(&clock, WithFailurePredicate(SchedulerOptions{}));
  CoordinatorOptions o;
  o.submit_rate_per_minute = 6;  // one token every 10 s, burst 1
  Coordinator c(&clock, &scheduler, o);
  v1::SubmitJobResponse r;
  grpc::ServerContext c1, c2, c3;
  const v1::SubmitJobRequest r1 = LimitJob("1"), r2 = LimitJob("2");
  ASSERT_TRUE(c.SubmitJob(&c1, &r1, &r).ok());
  const grpc::Status st = c.SubmitJob(&c2, &r2, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("retry in 10s"), std::string::npos) << st.error_message();
  clock.Advance(absl::Seconds(10));
  EXPECT_TRUE(c.SubmitJob(&c3, &r2, &r).ok());
}

TEST(CallLimits, OtherClientCallsPerClientWithRetryHintWorkersUnlimited) {
  FakeClock clock;
  Scheduler scheduler(&clock, WithFailurePredicate(SchedulerOptions{}));
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  CoordinatorOptions o;
  o.rpc_rate_per_second = 2;  // burst max(10, 4) = 10
  o.metrics = &metrics;
  Coordinator c(&clock, &scheduler, o);
  v1::SubmitJobResponse sub;
  grpc::ServerContext sctx;
  const v1::SubmitJobRequest sr = LimitJob("a");
  ASSERT_TRUE(c.SubmitJob(&sctx, &sr, &sub).ok());  // SubmitJob has its own limits, not this one
  v1::GetJobRequest g;
  g.set_job_id(sub.job().job_id());
  v1::Job job;
  for (int i = 0; i < 10; ++i) {
    grpc::ServerContext ctx;
    ASSERT_TRUE(c.GetJob(&ctx, &g, &job).ok()) << i;
  }
  grpc::ServerContext over;
  const grpc::Status st = c.GetJob(&over, &g, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("GetJob: client 'anonymous' is over 2 calls per second; retry in 500ms"),
            std::string::npos)
      << st.error_message();
  // Any client call counts against the same bucket; workers are not limited.
  grpc::ServerContext lctx;
  v1::ListJobsRequest lr;
  v1::ListJobsResponse lresp;
  EXPECT_EQ(c.ListJobs(&lctx, &lr, &lresp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (int i = 0; i < 20; ++i) {
    grpc::ServerContext wctx;
    v1::RegisterWorkerRequest wr;
    wr.set_worker_id("w1");
    wr.mutable_capabilities()->add_devices()->set_arch("cpu");
    v1::RegisterWorkerResponse wresp;
    ASSERT_TRUE(c.RegisterWorker(&wctx, &wr, &wresp).ok()) << i;
  }
  clock.Advance(absl::Milliseconds(500));
  grpc::ServerContext later;
  EXPECT_TRUE(c.GetJob(&later, &g, &job).ok());
  // Refusals are counted by method.
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("mxval_coordinator_calls_limited_total{method=\"GetJob\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("mxval_coordinator_calls_limited_total{method=\"ListJobs\"} 1"), std::string::npos);
}

TEST(KernelLibraries, AdminRegistersJobsNameThemTasksCarryTheDigestAndRegistrationsPersist) {
  const std::string db = ::testing::TempDir() + "/mxval_libraries_" + std::to_string(getpid()) + ".db";
  std::remove(db.c_str());
  const std::string sha(64, 'c');
  FakeClock clock;
  {
    auto store = SqliteStore::Open(db);
    ASSERT_TRUE(store.ok());
    auto libs = LibraryRegistry::Create(store->get());
    ASSERT_TRUE(libs.ok());
    auto scheduler = Scheduler::Create(&clock, WithFailurePredicate(SchedulerOptions{}), store->get());
    ASSERT_TRUE(scheduler.ok());
    CoordinatorOptions o;
    o.libraries = libs->get();
    Coordinator c(&clock, scheduler->get(), o);
    // Bad registrations name the field and change nothing.
    for (auto [name, build, digest, field] :
         {std::tuple{"../x", "b1", sha, "library.name"}, std::tuple{"mxval-builtin-cpu", "b1", sha, "library.name"},
          std::tuple{"pr-kernels", "", sha, "library.build_id"},
          std::tuple{"pr-kernels", "b1", std::string("C") + sha.substr(1), "library.sha256"}}) {
      v1::RegisterKernelLibraryRequest r;
      r.mutable_library()->set_name(name);
      r.mutable_library()->set_build_id(build);
      r.mutable_library()->set_sha256(digest);
      v1::RegisterKernelLibraryResponse resp;
      grpc::ServerContext ctx;
      const grpc::Status st = c.RegisterKernelLibrary(&ctx, &r, &resp);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
      EXPECT_EQ(st.error_message().rfind(field, 0), 0u) << st.error_message();
    }
    v1::RegisterKernelLibraryRequest r;
    r.mutable_library()->set_name("pr-kernels");
    r.mutable_library()->set_build_id("b1");
    r.mutable_library()->set_sha256(sha);
    r.mutable_library()->set_registered_by("someone-else");  // set by the coordinator
    v1::RegisterKernelLibraryResponse resp;
    grpc::ServerContext ctx;
    ASSERT_TRUE(c.RegisterKernelLibrary(&ctx, &r, &resp).ok());
    EXPECT_EQ(resp.library().registered_by(), "anonymous");
    v1::SubmitJobRequest sr = LimitJob("uses-lib");
    sr.mutable_spec()->mutable_candidate_kernel()->set_library("pr-kernels");
    sr.mutable_spec()->mutable_candidate_kernel()->set_build_id("b1");
    v1::SubmitJobResponse sub;
    grpc::ServerContext sctx;
    ASSERT_TRUE(c.SubmitJob(&sctx, &sr, &sub).ok());
    auto tasks = (*scheduler)->GetTasks(sub.job().job_id());
    ASSERT_TRUE(tasks.ok());
    ASSERT_FALSE(tasks->empty());
    v1::TaskSpec t;
    ASSERT_TRUE(t.ParseFromString((*tasks)[0].input.payload));
    EXPECT_EQ(t.candidate_kernel().sha256(), sha);
  }
  {  // A restarted coordinator knows the registration; unregistering it refuses new jobs that name it.
    auto store = SqliteStore::Open(db);
    ASSERT_TRUE(store.ok());
    auto libs = LibraryRegistry::Create(store->get());
    ASSERT_TRUE(libs.ok());
    Scheduler scheduler(&clock, WithFailurePredicate(SchedulerOptions{}));
    CoordinatorOptions o;
    o.libraries = libs->get();
    Coordinator c(&clock, &scheduler, o);
    v1::ListKernelLibrariesRequest lr;
    v1::ListKernelLibrariesResponse list;
    grpc::ServerContext ctx;
    ASSERT_TRUE(c.ListKernelLibraries(&ctx, &lr, &list).ok());
    ASSERT_EQ(list.libraries_size(), 1);
    EXPECT_EQ(list.libraries(0).sha256(), sha);
    v1::UnregisterKernelLibraryRequest ur;
    ur.set_name("pr-kernels");
    v1::UnregisterKernelLibraryResponse uresp;
    grpc::ServerContext uctx;
    ASSERT_TRUE(c.UnregisterKernelLibrary(&uctx, &ur, &uresp).ok());
    grpc::ServerContext again;
    EXPECT_EQ(c.UnregisterKernelLibrary(&again, &ur, &uresp).error_code(), grpc::StatusCode::NOT_FOUND);
    v1::SubmitJobRequest sr = LimitJob("uses-lib-2");
    sr.mutable_spec()->mutable_candidate_kernel()->set_library("pr-kernels");
    sr.mutable_spec()->mutable_candidate_kernel()->set_build_id("b1");
    v1::SubmitJobResponse sub;
    grpc::ServerContext sctx;
    const grpc::Status st = c.SubmitJob(&sctx, &sr, &sub);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("spec.candidate_kernel.library"), std::string::npos) << st.error_message();
  }
  auto store = SqliteStore::Open(db);
  EXPECT_TRUE((*LibraryRegistry::Create(store->get()))->Snapshot().empty());
  std::remove(db.c_str());
}

// Library content over real gRPC streams, kept in a SQLite store: an upload
// is registered only with the bytes its digest names (and nothing is stored
// otherwise), within the size limit; workers fetch it back in chunks, and
// registering the same digest again needs no upload.
TEST(KernelLibraries, UploadIsVerifiedBoundedStoredByDigestAndFetchedInChunks) {
  const std::string db = ::testing::TempDir() + "/mxval_content_" + std::to_string(getpid()) + ".db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  FakeClock clock;
  auto store = SqliteStore::Open(db);
  ASSERT_TRUE(store.ok());
  auto libs = LibraryRegistry::Create(store->get());
  ASSERT_TRUE(libs.ok());
  LibraryContentOptions lo;
  lo.max_bytes = 3 << 20;
  LibraryContent content(store->get(), lo);
  Scheduler scheduler(&clock, WithFailurePredicate(SchedulerOptions{}));
  CoordinatorOptions o;
  o.libraries = libs->get();
  o.library_content = &content;
  Coordinator c(&clock, &scheduler, o);
  int port = 0;
  auto server = StartServer("127.0.0.1:0", &c, &port);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto admin = v1::AdminService::NewStub(channel);
  auto workers = v1::WorkerService::NewStub(channel);
  auto ctx = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return c;
  };
  std::string bytes((5 << 20) / 2, '\0');  // 2.5 MiB: three stored chunks
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);
  auto reg = [&](const std::string& name, const std::string& sha) {
    v1::KernelLibraryRegistration r;
    r.set_name(name);
    r.set_build_id("b1");
    r.set_sha256(sha);
    return r;
  };
  // Streams `data` in pieces of `piece` bytes, announcing `announced` bytes.
  auto upload = [&](const v1::KernelLibraryRegistration& r, const std::string& data, size_t piece, int64_t announced,
                    v1::RegisterKernelLibraryResponse* resp) {
    auto cc = ctx();
    auto w = admin->UploadKernelLibrary(cc.get(), resp);
    v1::UploadKernelLibraryRequest m;
    *m.mutable_library() = r;
    m.set_content_bytes(announced);
    bool open = w->Write(m);
    for (size_t i = 0; open && i < data.size(); i += piece) {
      v1::UploadKernelLibraryRequest chunk;
      chunk.set_chunk(data.substr(i, piece));
      open = w->Write(chunk);
    }
    if (open) w->WritesDone();
    return w->Finish();
  };
  auto fetch = [&](const std::string& sha, std::string* out, v1::FetchKernelLibraryResponse* first) {
    auto cc = ctx();
    v1::FetchKernelLibraryRequest fr;
    fr.set_worker_id("w1");
    fr.set_sha256(sha);
    auto r = workers->FetchKernelLibrary(cc.get(), fr);
    v1::FetchKernelLibraryResponse m;
    for (int i = 0; r->Read(&m); ++i) {
      if (i == 0) *first = m;
      EXPECT_LE(m.chunk().size(), size_t{1} << 20);
      out->append(m.chunk());
    }
    return r->Finish();
  };
  const std::string sha = Sha256Hex(bytes);
  std::string flipped = bytes;
  flipped[2 << 20] ^= 1;
  v1::RegisterKernelLibraryResponse resp;
  // The bytes are not the registered digest: refused, nothing stored, nothing registered.
  grpc::Status st = upload(reg("lib-a", sha), flipped, 300000, static_cast<int64_t>(flipped.size()), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find(Sha256Hex(flipped)), std::string::npos) << st.error_message();
  EXPECT_FALSE((*content.Find(sha)).has_value());
  EXPECT_TRUE((*libs)->Snapshot().empty());
  // More bytes than announced, a size over the limit, an oversized message: refused too.
  EXPECT_EQ(upload(reg("lib-a", sha), bytes, 300000, 1000, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  st = upload(reg("lib-a", sha), "", 1, 4 << 20, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("--max-library-mib"), std::string::npos) << st.error_message();
  EXPECT_EQ(upload(reg("lib-a", sha), bytes, 2 << 20, static_cast<int64_t>(bytes.size()), &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(upload(reg("../a", sha), bytes, 300000, static_cast<int64_t>(bytes.size()), &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(upload(reg("lib-a", sha), bytes.substr(10), 300000, static_cast<int64_t>(bytes.size()), &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // fewer bytes than announced
  // Registering by digest alone while nothing is stored: NOT_FOUND.
  v1::RegisterKernelLibraryRequest rr;
  *rr.mutable_library() = reg("lib-b", sha);
  rr.set_require_content(true);
  EXPECT_EQ(admin->RegisterKernelLibrary(ctx().get(), rr, &resp).error_code(), grpc::StatusCode::NOT_FOUND);

  // The right bytes, in pieces that do not line up with the stored chunks.
  ASSERT_TRUE(upload(reg("lib-a", sha), bytes, 300000, static_cast<int64_t>(bytes.size()), &resp).ok());
  EXPECT_TRUE(resp.library().content_stored());
  EXPECT_EQ(resp.library().content_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ((*content.Find(sha))->chunks, 3);
  // Another name for the same bytes needs no upload.
  ASSERT_TRUE(admin->RegisterKernelLibrary(ctx().get(), rr, &resp).ok());
  EXPECT_TRUE(resp.library().content_stored());

  std::string got;
  v1::FetchKernelLibraryResponse first;
  // Only registered workers fetch.
  EXPECT_EQ(fetch(sha, &got, &first).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  {
    v1::RegisterWorkerRequest req;
    req.set_worker_id("w1");
    req.mutable_capabilities()->add_devices()->set_arch("cpu");
    v1::RegisterWorkerResponse r;
    ASSERT_TRUE(workers->RegisterWorker(ctx().get(), req, &r).ok());
  }
  got.clear();
  ASSERT_TRUE(fetch(sha, &got, &first).ok());
  EXPECT_EQ(got, bytes);
  EXPECT_EQ(first.content_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(first.format(), v1::LIBRARY_FORMAT_SHARED_OBJECT);
  got.clear();
  EXPECT_EQ(fetch(std::string(64, 'e'), &got, &first).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(fetch("../../etc/passwd", &got, &first).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Unregistering keeps the content: a task planned against it can still fetch it.
  v1::UnregisterKernelLibraryRequest ur;
  ur.set_name("lib-a");
  v1::UnregisterKernelLibraryResponse uresp;
  ASSERT_TRUE(admin->UnregisterKernelLibrary(ctx().get(), ur, &uresp).ok());
  got.clear();
  ASSERT_TRUE(fetch(sha, &got, &first).ok());
  EXPECT_EQ(got, bytes);
  server->Shutdown();
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
}

}  // namespace
}  // namespace mxval::coordinator

namespace mxval::coordinator {
namespace {

// A store that fails (here: its tasks table dropped behind its back, as a
// broken database would) is reported through on_store_error, counted and
// logged at a bounded rate; the caller still gets UNAVAILABLE.
TEST(StoreErrors, AreLoggedAndCounted) {
  const std::string db = ::testing::TempDir() + "/mxval_store_errors_" + std::to_string(getpid()) + ".db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  FakeClock clock;
  std::vector<std::string> log;
  StoreErrorReporter reporter(&clock, [&log](const std::string& line) { log.push_back(line); });
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  reporter.set_metrics(&metrics);
  auto store = SqliteStore::Open(db);
  ASSERT_TRUE(store.ok());
  SchedulerOptions so;
  so.on_store_error = [&reporter](const absl::Status& st) { reporter.Report(st); };
  auto scheduler = Scheduler::Create(&clock, so, store->get());
  ASSERT_TRUE(scheduler.ok());
  JobInput in;
  in.tasks.push_back({"cpu", "k0", "p0"});
  in.tasks.push_back({"cpu", "k1", "p1"});
  ASSERT_TRUE((*scheduler)->Submit(in).ok());
  auto lease = (*scheduler)->LeaseTask("w", {"cpu"});
  ASSERT_TRUE(lease.has_value());
  {
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &other), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "DROP TABLE tasks", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(other);
  }
  EXPECT_EQ((*scheduler)->Complete(lease->lease_id, "r").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*scheduler)->Renew(lease->lease_id).code(), absl::StatusCode::kUnavailable);
  clock.Advance(absl::Seconds(11));
  EXPECT_EQ((*scheduler)->Renew(lease->lease_id).code(), absl::StatusCode::kUnavailable);
  ASSERT_EQ(log.size(), 2u);  // the first, then one more after the interval
  EXPECT_NE(log[0].find("store error: "), std::string::npos) << log[0];
  EXPECT_NE(log[1].find("(and 1 more"), std::string::npos) << log[1];
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("mxval_coordinator_store_errors_total 3"), std::string::npos) << text;
  scheduler->reset();
  store->reset();
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
}

}  // namespace
}  // namespace mxval::coordinator
