// Kernel-task triage end to end: a coordinator, two worker daemons running
// tasks in child processes, and kernel plugins broken in known ways. Each
// job's tasks must land in the class an engineer would give them, with the
// evidence, and none may be misclassified.
#include "absl/strings/str_cat.h"
#include "common/digest.h"
#include <cstdlib>
#include <map>
#include <thread>

#include "gtest/gtest.h"
#include "service/coordinator/coordinator_service.h"
#include "service/triage/kernel_triage.h"
#include "service/worker/worker.h"

namespace mxval {
namespace {

using coordinator::Coordinator;
using coordinator::CoordinatorOptions;
using coordinator::Scheduler;

class TriageE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    marker_dir_ = ::testing::TempDir() + "/mxval_triage_markers_" + std::to_string(getpid());
    ASSERT_EQ(system(("rm -rf " + marker_dir_ + " && mkdir -p " + marker_dir_).c_str()), 0);
    setenv("MXVAL_EXAMPLE_MARKER_DIR", marker_dir_.c_str(), 1);  // inherited by task children
    CoordinatorOptions o;
    o.max_long_poll = absl::Milliseconds(300);
    // Registered as an admin would (name, build, digest of the file the workers load).
    libraries_ = std::move(*coordinator::LibraryRegistry::Create(nullptr));
    for (auto [lib, build] : {std::pair{"example_plugin", "example-1"}, {"example_plugin_buggy", "example-buggy-1"},
                              {"example_plugin_wrong", "example-wrong-1"},
                              {"example_plugin_crash_once", "example-crash-once-1"},
                              {"example_plugin_flaky_once", "example-flaky-once-1"}}) {
      v1::KernelLibraryRegistration reg;
      reg.set_name(lib);
      reg.set_build_id(build);
      reg.set_sha256(*Sha256HexOfFile(absl::StrCat(MXVAL_PLUGIN_DIR, "/lib", lib, ".so")));
      ASSERT_TRUE(libraries_->Register(reg, "test-admin", absl::Now()).ok());
    }
    o.libraries = libraries_.get();
    coordinator_ = std::make_unique<Coordinator>(RealClock::Get(), &scheduler_, o);
    server_ = coordinator::StartServer("127.0.0.1:0", coordinator_.get(), &port_);
    ASSERT_NE(server_, nullptr);
    for (const char* id : {"w1", "w2"}) {
      worker::WorkerOptions wo;
      wo.coordinator = "127.0.0.1:" + std::to_string(port_);
      wo.worker_id = id;
      wo.child_argv = {MXVAL_BIN, "__run-task", "--kernel-dir", MXVAL_PLUGIN_DIR, "--threads", "1"};
      wo.long_poll = absl::Milliseconds(300);
      wo.task_timeout = absl::Seconds(60);
      auto w = worker::Worker::Create(wo);
      ASSERT_TRUE(w.ok()) << w.status();
      workers_.push_back(std::move(*w));
    }
    for (auto& w : workers_) threads_.emplace_back([&w] { EXPECT_TRUE(w->Run().ok()); });
  }
  void TearDown() override {
    for (auto& w : workers_) w->Drain();
    for (auto& t : threads_) t.join();
    server_->Shutdown();
    unsetenv("MXVAL_EXAMPLE_MARKER_DIR");
  }

  // glm5-tp4 at M=3: a K-up task (K=192) and a V-up task (K=512).
  std::string Submit(const std::string& baseline_lib, const std::string& baseline_build,
                     const std::string& candidate_lib, const std::string& candidate_build) {
    v1::SubmitJobRequest req;
    v1::JobSpec* s = req.mutable_spec();
    s->add_presets("glm5-tp4");
    s->set_no_layout_probes(true);  // the once-only faults must meet the tasks they are written for
    s->add_m_values(3);
    s->set_repetitions(1);
    s->mutable_baseline_kernel()->set_library(baseline_lib);
    s->mutable_baseline_kernel()->set_kernel("example_naive");
    s->mutable_baseline_kernel()->set_build_id(baseline_build);
    s->mutable_candidate_kernel()->set_library(candidate_lib);
    s->mutable_candidate_kernel()->set_kernel("example_naive");
    s->mutable_candidate_kernel()->set_build_id(candidate_build);
    v1::SubmitJobResponse resp;
    grpc::ServerContext ctx;
    const grpc::Status st = coordinator_->SubmitJob(&ctx, &req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job().job_id();
  }

  // op -> the task's triage, once the job is done (the bound guards a hang).
  std::map<v1::Op, v1::TaskResult> WaitDone(const std::string& job_id) {
    const absl::Time until = absl::Now() + absl::Seconds(120);
    v1::Job job;
    while (absl::Now() < until) {
      auto j = coordinator_->BuildJob(job_id, true);
      if (j.ok() && j->state() == v1::JOB_STATE_DONE) {
        job = *j;
        break;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_EQ(job.state(), v1::JOB_STATE_DONE) << job_id;
    std::map<v1::Op, v1::TaskResult> out;
    for (const v1::TaskResult& r : job.results()) out[r.shape().op()] = r;
    return out;
  }

  Scheduler scheduler_{RealClock::Get(),
                       coordinator::WithFailurePredicate(coordinator::MakeSchedulerOptions(absl::Seconds(30), 3, 10000))};
  std::unique_ptr<coordinator::LibraryRegistry> libraries_;  // outlives the coordinator
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string marker_dir_;
  std::vector<std::unique_ptr<worker::Worker>> workers_;
  std::vector<std::thread> threads_;
};

std::string Describe(const v1::TaskResult& r) {
  std::string s = std::string(triage::TriageClassName(r.triage().triage_class())) + ": " + r.triage().reason();
  for (const auto& e : r.triage().evidence()) s += "\n  " + e;
  return s;
}

TEST_F(TriageE2E, EveryClassFromRealRuns) {
  // 1. A candidate build with the ragged-K mask bug (K=192 loses half of K):
  //    PR_TOUCHED on K-up, confirmed by the verification re-run; V-up passes.
  auto buggy = WaitDone(Submit("example_plugin", "example-1", "example_plugin_buggy", "example-buggy-1"));
  ASSERT_EQ(buggy.size(), 2u);
  const v1::TaskResult& kup = buggy[v1::OP_KUP];
  EXPECT_EQ(kup.triage().triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Describe(kup);
  EXPECT_TRUE(kup.triage().kernel_differs());
  EXPECT_NE(kup.triage().first_candidate().accuracy().verdict(), v1::VERDICT_PASS);  // first run kept
  EXPECT_EQ(kup.attempts_size(), 2);  // the run and its verification
  EXPECT_FALSE(kup.triage().possible_race());  // deterministic bug: same failure twice
  EXPECT_EQ(buggy[v1::OP_VUP].triage().triage_class(), v1::TRIAGE_CLASS_PASS) << Describe(buggy[v1::OP_VUP]);

  // 2. A kernel that is wrong under both tables: PRE_EXISTING, not the change.
  auto wrong = WaitDone(Submit("example_plugin_wrong", "example-wrong-1", "example_plugin_wrong", "example-wrong-1"));
  for (const auto& [op, r] : wrong) {
    EXPECT_EQ(r.triage().triage_class(), v1::TRIAGE_CLASS_PRE_EXISTING) << Describe(r);
    EXPECT_EQ(r.triage().signature().rfind("baseline FAIL_", 0), 0u) << r.triage().signature();
  }

  // 3. A child that crashes once and then passes: INFRA (recovered), with
  //    the crash as evidence; the other task passes.
  auto crash = WaitDone(
      Submit("example_plugin_crash_once", "example-crash-once-1", "example_plugin_crash_once", "example-crash-once-1"));
  int recovered = 0;
  for (const auto& [op, r] : crash) {
    if (r.triage().triage_class() == v1::TRIAGE_CLASS_INFRA) {
      ++recovered;
      EXPECT_NE(r.triage().reason().find("recovered"), std::string::npos) << Describe(r);
      EXPECT_NE(r.triage().signature().find("signal 11"), std::string::npos) << Describe(r);
      EXPECT_EQ(r.baseline().accuracy().verdict(), v1::VERDICT_PASS);
    } else {
      EXPECT_EQ(r.triage().triage_class(), v1::TRIAGE_CLASS_PASS) << Describe(r);
    }
  }
  EXPECT_EQ(recovered, 1);

  // 4. A candidate that is wrong once, then right on the same inputs: FLAKY.
  auto flaky = WaitDone(Submit("example_plugin", "example-1", "example_plugin_flaky_once", "example-flaky-once-1"));
  int flakes = 0;
  for (const auto& [op, r] : flaky) {
    if (r.triage().triage_class() == v1::TRIAGE_CLASS_FLAKY) {
      ++flakes;
      EXPECT_NE(r.triage().first_candidate().accuracy().verdict(), v1::VERDICT_PASS) << Describe(r);
      EXPECT_EQ(r.candidate().accuracy().verdict(), v1::VERDICT_PASS);
    } else {
      EXPECT_EQ(r.triage().triage_class(), v1::TRIAGE_CLASS_PASS) << Describe(r);
    }
  }
  EXPECT_EQ(flakes, 1);
}

}  // namespace
}  // namespace mxval
