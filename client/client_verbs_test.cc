// The CLI as a gRPC client: against a hostile fake coordinator (oversized
// and control-character answers, an unprintable Duration, paging), against a
// real in-process coordinator (a restart under a submit with a request id,
// a rate limit), and the NOT VALIDATED gate of the reports.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/cli.h"
#include "client/report.h"
#include "client/verb_util.h"
#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mxval/v1/mxval.grpc.pb.h"
#include "service/coordinator/coordinator_service.h"

namespace mxval {
namespace {

struct Result {
  int code;
  std::string out, err;
};

Result Cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

// ------------------------------------------------------------ sanitising

TEST(SanitizeForTerminal, EscapesControlsDelC1AndInvalidUtf8AndKeepsText) {
  EXPECT_EQ(SanitizeForTerminal("\x1b[2Jevil"), "\\x1b[2Jevil");
  EXPECT_EQ(SanitizeForTerminal("a\rb\bc\x7f"), "a\\x0db\\x08c\\x7f");
  EXPECT_EQ(SanitizeForTerminal("csi\xc2\x9b" "31m"), "csi\\xc2\\x9b31m");  // C1 CSI as UTF-8
  EXPECT_EQ(SanitizeForTerminal("bad\xff\xfe"), "bad\\xff\\xfe");
  EXPECT_EQ(SanitizeForTerminal("cut\xe2\x82"), "cut\\xe2\\x82");           // a truncated sequence
  EXPECT_EQ(SanitizeForTerminal("\xc0\xaf"), "\\xc0\\xaf");                  // overlong '/'
  EXPECT_EQ(SanitizeForTerminal("\xed\xa0\x80"), "\\xed\\xa0\\x80");          // a surrogate
  EXPECT_EQ(SanitizeForTerminal("µs \xc2\xa0 \xf0\x9f\x99\x82 ä"), "µs \xc2\xa0 \xf0\x9f\x99\x82 ä");
  EXPECT_EQ(SanitizeForTerminal("two\nlines\tx"), "two\\x0alines\\x09x");
  EXPECT_EQ(SanitizeForTerminal("two\nlines\tx\x1b", /*keep_line_breaks=*/true), "two\nlines\tx\\x1b");
  EXPECT_EQ(SanitizeForTerminal(std::string("nul\0x", 5)), "nul\\x00x");
}

TEST(SanitizeForTerminal, MarkdownAndXmlCarryNoControlCharacters) {
  const std::string hostile = "w\x1b[2J\x07\xc2\x9b\xff<b>";
  for (const std::string& s : {MarkdownEscape(hostile), XmlEscape(hostile)}) {
    for (unsigned char c : s) EXPECT_TRUE(c >= 0x20 && c != 0x7f) << s;
    EXPECT_NE(s.find("\\x1b"), std::string::npos) << s;
    EXPECT_EQ(s.find("\xc2\x9b"), std::string::npos) << s;
  }
  EXPECT_EQ(XmlEscape("a<b\n"), "a&lt;b\n");
}

// ------------------------------------------------------------ retries

TEST(CallWithRetry, RetriesUnavailableWithGrowingJitteredBackoffWithinTheBudget) {
  absl::Time now = absl::UnixEpoch();
  std::vector<absl::Duration> waits;
  RetryOptions o;
  o.budget = absl::Seconds(10);
  o.now = [&] { return now; };
  o.sleep = [&](absl::Duration d) {
    waits.push_back(d);
    now += d;
  };
  o.uniform = [] { return 0.0; };  // the jitter's low end: half the step
  int calls = 0;
  std::ostringstream err;
  grpc::Status st = CallWithRetry("submit", o, err, [&] {
    return ++calls < 4 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused") : grpc::Status::OK;
  });
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(calls, 4);
  ASSERT_EQ(waits.size(), 3u);
  EXPECT_EQ(waits[0], absl::Milliseconds(100));
  EXPECT_EQ(waits[1], absl::Milliseconds(200));
  EXPECT_EQ(waits[2], absl::Milliseconds(400));
  EXPECT_NE(err.str().find("mxval submit: coordinator unavailable (connection refused"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("retry 3 in 0.4 s"), std::string::npos) << err.str();

  // Down for good: the waits stop before the budget, and the last status is returned.
  calls = 0;
  waits.clear();
  o.uniform = [] { return 0.999; };
  st = CallWithRetry("submit", o, err, [&] {
    ++calls;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
  });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  absl::Duration total;
  for (absl::Duration d : waits) {
    total += d;
    EXPECT_LE(d, o.max_backoff);
  }
  EXPECT_LE(total, o.budget);
  EXPECT_GT(total, o.budget / 2);
  EXPECT_EQ(calls, static_cast<int>(waits.size()) + 1);

  // Not retried: a caller's mistake, and with no budget anything.
  for (auto [code, budget] : {std::pair{grpc::StatusCode::INVALID_ARGUMENT, absl::Seconds(10)},
                              std::pair{grpc::StatusCode::UNAVAILABLE, absl::ZeroDuration()}}) {
    calls = 0;
    o.budget = budget;
    st = CallWithRetry("submit", o, err, [&, code = code] {
      ++calls;
      return grpc::Status(code, "no");
    });
    EXPECT_EQ(st.error_code(), code);
    EXPECT_EQ(calls, 1);
  }
  o.retry_deadline_exceeded = false;
  EXPECT_FALSE(RetryableStatus(o, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "")));
  o.retry_deadline_exceeded = true;
  EXPECT_TRUE(RetryableStatus(o, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "")));
}

// ------------------------------------------------------------ a hostile coordinator

// Answers what a broken or hostile coordinator could: whatever the test puts
// in its fields. ListJobs serves at most 3 jobs per page.
class FakeCoordinator final : public v1::ValidationService::Service, public v1::AdminService::Service {
 public:
  // max_send: -1 sends messages of any size (a server configured past the
  // 16 MiB every coordinator keeps to).
  explicit FakeCoordinator(int max_send = kMaxMessageBytes) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.SetMaxSendMessageSize(max_send);
    b.RegisterService(static_cast<v1::ValidationService::Service*>(this));
    b.RegisterService(static_cast<v1::AdminService::Service*>(this));
    server_ = b.BuildAndStart();
  }
  ~FakeCoordinator() override { server_->Shutdown(std::chrono::system_clock::now()); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::Job* job) override {
    absl::MutexLock l(&mu_);
    *job = job_;
    return grpc::Status::OK;
  }
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* r, v1::ListJobsResponse* resp) override {
    absl::MutexLock l(&mu_);
    tokens_.push_back(r->page_token());
    const size_t from = r->page_token().empty() ? 0 : std::stoul(r->page_token());
    const size_t to = std::min({jobs_.size(), from + 3, from + static_cast<size_t>(r->page_size())});
    for (size_t i = from; i < to; ++i) *resp->add_jobs() = jobs_[i];
    if (to < jobs_.size()) resp->set_next_page_token(absl::StrCat(to));
    return grpc::Status::OK;
  }
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* r, v1::SubmitJobResponse* resp) override {
    if (r->request_id() == "accept") {
      resp->mutable_job()->set_job_id("job-\x1b[2J");
      return grpc::Status::OK;
    }
    ctx->AddTrailingMetadata("retry-after-ms", "1234");
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "client anonymous: 1 submits per minute");
  }
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*, v1::ListWorkersResponse* r) override {
    absl::MutexLock l(&mu_);
    *r = workers_;
    return grpc::Status::OK;
  }
  // The first stream delivers one result and breaks as a coordinator going
  // down would; the next replays it and finishes the job with a task whose
  // sides both could not run.
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*, grpc::ServerWriter<v1::JobEvent>* w) override {
    int call;
    {
      absl::MutexLock l(&mu_);
      call = ++watch_calls_;
    }
    v1::JobEvent ev;
    ev.mutable_job()->set_job_id("job-1");
    ev.mutable_job()->set_state(v1::JOB_STATE_RUNNING);
    ev.mutable_job()->mutable_progress()->set_tasks_total(2);
    ev.mutable_result()->set_task_id("task-one");
    ev.mutable_result()->mutable_baseline()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    ev.mutable_result()->mutable_candidate()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    w->Write(ev);
    if (call == 1) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down");
    ev.mutable_result()->set_task_id("task-two");
    for (v1::KernelRun* k : {ev.mutable_result()->mutable_baseline(), ev.mutable_result()->mutable_candidate()}) {
      k->mutable_accuracy()->set_verdict(v1::VERDICT_ERROR);
      k->mutable_accuracy()->set_reason("no device");
    }
    ev.mutable_result()->mutable_triage()->set_triage_class(v1::TRIAGE_CLASS_PRE_EXISTING);
    w->Write(ev);
    ev.clear_result();
    ev.mutable_job()->set_state(v1::JOB_STATE_DONE);
    ev.mutable_job()->mutable_progress()->set_tasks_done(2);
    w->Write(ev);
    return grpc::Status::OK;
  }
  grpc::Status DrainWorker(grpc::ServerContext*, const v1::DrainWorkerRequest*, v1::DrainWorkerResponse*) override {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "worker_id: '\x1b[2Jx' is not registered");
  }

  absl::Mutex mu_;
  v1::Job job_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> tokens_ ABSL_GUARDED_BY(mu_);
  v1::ListWorkersResponse workers_ ABSL_GUARDED_BY(mu_);
  int watch_calls_ ABSL_GUARDED_BY(mu_) = 0;

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

v1::Job DoneJob(const std::string& id, const std::string& name) {
  v1::Job j;
  j.set_job_id(id);
  j.set_state(v1::JOB_STATE_DONE);
  j.mutable_spec()->set_name(name);
  return j;
}

TEST(ClientVerbs, ReceiveLimitMatchesTheServersSendLimit) {
  EXPECT_EQ(kMaxMessageBytes, coordinator::CoordinatorOptions{}.max_message_bytes);
}

TEST(ClientVerbs, AJobWithAFiveMiBNameListsAndPrints) {
  FakeCoordinator fake;
  const std::string name = "big-" + std::string(5 << 20, 'n');
  {
    absl::MutexLock l(&fake.mu_);
    fake.job_ = DoneJob("job-1", name);
    fake.jobs_ = {fake.job_};
  }
  Result r = Cli({"jobs", "--coordinator", fake.address()});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("job-1"), std::string::npos);
  EXPECT_NE(r.out.find("big-nnn"), std::string::npos);
  EXPECT_LT(r.out.size(), 4096u) << "the table cell is cut, not 5 MiB wide";
  r = Cli({"jobs", "--coordinator", fake.address(), "--json"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find(name), std::string::npos);
  r = Cli({"get", "--coordinator", fake.address(), "--job", "job-1", "--format", "markdown"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("## mxval job-1: big-nnn"), std::string::npos);
}

TEST(ClientVerbs, APageOverTheReceiveLimitIsAskedAgainSmallerAndAnOversizedJobIsNoRateLimit) {
  FakeCoordinator fake(/*max_send=*/-1);
  {
    absl::MutexLock l(&fake.mu_);
    for (int i = 1; i <= 3; ++i) fake.jobs_.push_back(DoneJob(absl::StrCat("job-", i), std::string(6 << 20, 'a' + i)));
    fake.job_ = DoneJob("job-big", std::string(17 << 20, 'x'));
  }
  // 3 x 6 MiB is past 16 MiB: the page is halved until one fits.
  Result r = Cli({"jobs", "--coordinator", fake.address(), "--limit", "3"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  for (int i = 1; i <= 3; ++i) EXPECT_NE(r.out.find(absl::StrCat("job-", i, " ")), std::string::npos) << r.out;
  {
    absl::MutexLock l(&fake.mu_);
    EXPECT_EQ(fake.tokens_, (std::vector<std::string>{"", "", "1", "2"}));  // 3 jobs refused, then 1, 1, 1
  }
  r = Cli({"get", "--coordinator", fake.address(), "--job", "job-big"});
  EXPECT_EQ(r.code, kExitInternal) << r.err;
  EXPECT_NE(r.err.find("larger than max"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("retry later"), std::string::npos) << r.err;
}

TEST(ClientVerbs, JobsPagesThroughListJobs) {
  FakeCoordinator fake;
  {
    absl::MutexLock l(&fake.mu_);
    for (int i = 1; i <= 8; ++i) fake.jobs_.push_back(DoneJob(absl::StrCat("job-", i), absl::StrCat("name-", i)));
  }
  Result r = Cli({"jobs", "--coordinator", fake.address(), "--limit", "7"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  for (int i = 1; i <= 7; ++i) EXPECT_NE(r.out.find(absl::StrCat("name-", i, "\n")), std::string::npos) << i << r.out;
  EXPECT_EQ(r.out.find("name-8"), std::string::npos) << r.out;
  {
    absl::MutexLock l(&fake.mu_);
    EXPECT_EQ(fake.tokens_, (std::vector<std::string>{"", "3", "6"}));
    fake.tokens_.clear();
  }
  r = Cli({"jobs", "--coordinator", fake.address(), "--json"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("name-8"), std::string::npos) << r.out;
  absl::MutexLock l(&fake.mu_);
  EXPECT_EQ(fake.tokens_.size(), 3u);
}

TEST(ClientVerbs, ControlCharactersFromTheServerNeverReachTheTerminal) {
  FakeCoordinator fake;
  {
    absl::MutexLock l(&fake.mu_);
    v1::WorkerStatus* w = fake.workers_.add_workers();
    w->set_worker_id("\x1b[2Jevil");
    w->set_state(v1::WORKER_STATE_ACTIVE);
    v1::DeviceInfo* d = w->mutable_capabilities()->add_devices();
    d->set_arch("sm\x1b]0;title\x07");
    fake.job_ = DoneJob("job-\x1b[2J", "name\x1b[31m\r\xc2\x9b");
    fake.jobs_ = {fake.job_};
  }
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"workers"}, {"jobs"}, {"get", "--job", "j", "--format", "table"},
        {"get", "--job", "j", "--format", "markdown"}, {"get", "--job", "j", "--format", "junit"},
        {"drain", "--worker", "x"}, {"submit", "--preset", "dsv3-tp8", "--request-id", "accept"}}) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--coordinator", fake.address()});
    const Result r = Cli(a);
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << args[0] << ": " << r.out;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << args[0] << ": " << r.err;
    EXPECT_EQ(r.out.find('\r'), std::string::npos) << args[0];
    EXPECT_EQ(r.out.find("\xc2\x9b"), std::string::npos) << args[0];
  }
  Result r = Cli({"workers", "--coordinator", fake.address()});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("\\x1b[2Jevil"), std::string::npos) << r.out;
  // JSON stays exact JSON: its own escaping covers control characters.
  r = Cli({"workers", "--coordinator", fake.address(), "--json"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\\u001b[2Jevil"), std::string::npos) << r.out;
}

TEST(ClientVerbs, WatchReopensABrokenStreamAndGatesOnWhatCouldNotRun) {
  FakeCoordinator fake;
  const Result r = Cli({"watch", "--coordinator", fake.address(), "--job", "job-1"});
  EXPECT_EQ(r.code, kExitNotValidated) << r.out << r.err;
  {
    absl::MutexLock l(&fake.mu_);
    EXPECT_EQ(fake.watch_calls_, 2);
  }
  EXPECT_NE(r.err.find("coordinator unavailable (coordinator shutting down"), std::string::npos) << r.err;
  const size_t first = r.out.find("task-one M=0 done");
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("task-one", first + 1), std::string::npos) << "printed once: " << r.out;
  EXPECT_NE(r.out.find("task-two M=0 done PRE_EXISTING"), std::string::npos) << r.out;
  // A gate that counts every failure fails the job instead.
  FakeCoordinator strict;
  EXPECT_EQ(Cli({"watch", "--coordinator", strict.address(), "--job", "job-1", "--fail-on", "any"}).code, kExitFailed);
  // No retries: the broken stream is the answer.
  FakeCoordinator again;
  EXPECT_EQ(Cli({"watch", "--coordinator", again.address(), "--job", "job-1", "--retry-seconds", "0"}).code,
            kExitInternal);
}

TEST(ClientVerbs, UnprintableJsonExitsThreeWithNothingOnStdout) {
  FakeCoordinator fake;
  {
    absl::MutexLock l(&fake.mu_);
    fake.job_ = DoneJob("job-1", "far");
    fake.job_.mutable_spec()->mutable_deadline()->set_seconds(1'000'000'000'000'000);  // past Duration's range
    fake.jobs_ = {fake.job_};
  }
  Result r = Cli({"get", "--coordinator", fake.address(), "--job", "job-1", "--format", "json"});
  EXPECT_EQ(r.code, kExitInternal);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("cannot print the answer as JSON"), std::string::npos) << r.err;
  r = Cli({"jobs", "--coordinator", fake.address(), "--json"});
  EXPECT_EQ(r.code, kExitInternal);
  EXPECT_EQ(r.out, "");
  // The table does not print the deadline.
  EXPECT_EQ(Cli({"jobs", "--coordinator", fake.address()}).code, kExitOk);
}

TEST(ClientVerbs, ResourceExhaustedExitsFiveWithTheSuggestedWait) {
  FakeCoordinator fake;
  const Result r = Cli({"submit", "--coordinator", fake.address(), "--preset", "dsv3-tp8", "--m", "1"});
  EXPECT_EQ(r.code, kExitLimited) << r.err;
  EXPECT_NE(r.err.find("1 submits per minute"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("after 1234 ms"), std::string::npos) << r.err;
}

// ------------------------------------------------------------ a real coordinator

struct RealCoordinator {
  explicit RealCoordinator(coordinator::CoordinatorOptions o = {}, const std::string& address = "127.0.0.1:0")
      : coord(&clock, &scheduler, std::move(o)) {
    server = coordinator::StartServer(address, &coord, &port);
  }
  ~RealCoordinator() {
    if (server) server->Shutdown(std::chrono::system_clock::now());
  }
  FakeClock clock;
  coordinator::Scheduler scheduler{&clock, coordinator::WithFailurePredicate(coordinator::SchedulerOptions{})};
  coordinator::Coordinator coord;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

TEST(ClientVerbs, RateLimitedSubmitExitsFive) {
  coordinator::CoordinatorOptions o;
  o.submit_rate_per_minute = 1;  // burst 1, and the fake clock never refills it
  RealCoordinator c(o);
  ASSERT_NE(c.server, nullptr);
  const std::string addr = absl::StrCat("127.0.0.1:", c.port);
  Result r = Cli({"submit", "--coordinator", addr, "--preset", "dsv3-tp8", "--m", "1"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  r = Cli({"submit", "--coordinator", addr, "--preset", "dsv3-tp8", "--m", "2"});
  EXPECT_EQ(r.code, kExitLimited) << r.err;
  EXPECT_NE(r.err.find("retry later"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ms)"), std::string::npos) << "the retry-after-ms trailer: " << r.err;
}

// A port nothing listens on now (bound, read, released).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

TEST(ClientVerbs, SubmitWithARequestIdRidesOutACoordinatorThatStartsLate) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  // Without a request id nothing is retried, and the error says why.
  Result r = Cli({"submit", "--coordinator", addr, "--preset", "dsv3-tp8", "--m", "1"});
  EXPECT_EQ(r.code, kExitInternal) << r.err;
  EXPECT_NE(r.err.find("not retried: without --request-id"), std::string::npos) << r.err;

  std::unique_ptr<RealCoordinator> c;
  std::atomic<bool> started{false};
  std::thread late([&] {
    absl::SleepFor(absl::Seconds(1));  // the coordinator comes up while the submit is retrying
    c = std::make_unique<RealCoordinator>(coordinator::CoordinatorOptions{}, addr);
    started = true;
  });
  r = Cli({"submit", "--coordinator", addr, "--preset", "dsv3-tp8", "--m", "1", "--request-id", "late-1",
           "--retry-seconds", "60"});
  late.join();
  ASSERT_TRUE(started);
  ASSERT_NE(c->server, nullptr) << "port " << port << " was taken meanwhile";
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "job-1\n");
  EXPECT_NE(r.err.find("coordinator unavailable"), std::string::npos) << "at least one retry was logged: " << r.err;
  EXPECT_NE(r.err.find("retry 1 in"), std::string::npos) << r.err;
}

// ------------------------------------------------------------ the gate

v1::TaskResult Task(v1::Verdict baseline, v1::Verdict candidate, v1::TriageClass triage) {
  v1::TaskResult r;
  r.set_task_id("t");
  r.mutable_shape()->set_op(v1::OP_KUP);
  r.mutable_shape()->set_b(16);
  r.mutable_shape()->set_n(512);
  r.mutable_shape()->set_k(128);
  r.set_m(4);
  r.set_arch("sm_90a");
  r.mutable_baseline()->mutable_accuracy()->set_verdict(baseline);
  r.mutable_candidate()->mutable_accuracy()->set_verdict(candidate);
  r.mutable_triage()->set_triage_class(triage);
  return r;
}

v1::Job JobOf(std::vector<v1::TaskResult> results, int total = -1) {
  v1::Job job = DoneJob("job-7", "gate");
  for (auto& r : results) *job.add_results() = r;
  job.mutable_progress()->set_tasks_total(total < 0 ? job.results_size() : total);
  job.mutable_progress()->set_tasks_done(job.results_size());
  return job;
}

TEST(NotValidated, BothSidesErroredIsNotValidatedAndSaysWhy) {
  v1::TaskResult t = Task(v1::VERDICT_ERROR, v1::VERDICT_ERROR, v1::TRIAGE_CLASS_PRE_EXISTING);
  t.mutable_baseline()->mutable_accuracy()->set_reason("cudaErrorNoDevice");
  t.mutable_candidate()->mutable_accuracy()->set_reason("library not loadable");
  const v1::Job job = JobOf({t, Task(v1::VERDICT_PASS, v1::VERDICT_PASS, v1::TRIAGE_CLASS_PASS)});
  EXPECT_EQ(JobExitCode(job, GatePolicy{}), kExitNotValidated);
  GatePolicy any;
  ASSERT_TRUE(ParseGatePolicy("any", &any));
  EXPECT_EQ(JobExitCode(job, any), kExitFailed) << "a gate that fails the job wins";
  const std::vector<NotValidatedTask> nv = NotValidatedTasks(job);
  ASSERT_EQ(nv.size(), 1u);
  EXPECT_EQ(nv[0].task, "kup B=16 N=512 K=128 M=4 sm_90a");
  EXPECT_EQ(nv[0].reason, "baseline could not run: cudaErrorNoDevice; candidate could not run: library not loadable");
  const std::string md = FormatReport(job, "markdown");
  EXPECT_NE(md.find("**NOT VALIDATED: 1 of 2 tasks**"), std::string::npos) << md;
  EXPECT_NE(md.find("candidate could not run: library not loadable"), std::string::npos) << md;
  const std::string table = FormatReport(job, "table");
  EXPECT_NE(table.find("NOT VALIDATED: 1 of 2 tasks"), std::string::npos) << table;
  EXPECT_NE(table.find("  kup B=16 N=512 K=128 M=4 sm_90a: baseline could not run: cudaErrorNoDevice"), std::string::npos)
      << table;
  const std::string junit = FormatReport(job, "junit");
  EXPECT_NE(junit.find("failures=\"0\" errors=\"2\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<error message=\"not validated: baseline could not run"), std::string::npos) << junit;
  EXPECT_EQ(junit.find("<failure"), std::string::npos) << junit;
}

TEST(NotValidated, BothSidesDecliningIsALegitimateAnswer) {
  v1::TaskResult t = Task(v1::VERDICT_ERROR, v1::VERDICT_ERROR, v1::TRIAGE_CLASS_PRE_EXISTING);
  t.mutable_baseline()->set_declined(true);
  t.mutable_candidate()->set_declined(true);
  const v1::Job job = JobOf({t});
  EXPECT_TRUE(NotValidatedTasks(job).empty());
  EXPECT_EQ(JobExitCode(job, GatePolicy{}), kExitOk);
  EXPECT_EQ(FormatReport(job, "markdown").find("NOT VALIDATED"), std::string::npos);
  const std::string junit = FormatReport(job, "junit");
  EXPECT_NE(junit.find("failures=\"0\" errors=\"0\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<skipped message=\"neither kernel takes this case"), std::string::npos) << junit;
  // One side declined, the other could not run: not validated.
  t.mutable_candidate()->set_declined(false);
  EXPECT_EQ(JobExitCode(JobOf({t}), GatePolicy{}), kExitNotValidated);
}

TEST(NotValidated, InfraAndMissingResultsAreNotValidatedAndPrTouchedFails) {
  v1::TaskResult infra;
  infra.mutable_shape()->set_op(v1::OP_VUP);
  infra.set_arch("sm_90a");
  v1::Attempt* a = infra.add_attempts();
  a->set_failure(v1::FAILURE_CLASS_INFRA);
  a->set_failure_detail("killed by signal 9");
  infra.mutable_triage()->set_triage_class(v1::TRIAGE_CLASS_INFRA);
  v1::Job job = JobOf({infra});
  EXPECT_EQ(JobExitCode(job, GatePolicy{}), kExitNotValidated);
  ASSERT_EQ(NotValidatedTasks(job).size(), 1u);
  EXPECT_EQ(NotValidatedTasks(job)[0].reason, "infrastructure failure after 1 attempt: killed by signal 9");
  // A task triaged INFRA whose sides carry verdicts (an infrastructure retry that passed no check).
  job = JobOf({Task(v1::VERDICT_PASS, v1::VERDICT_FAIL_MISMATCH, v1::TRIAGE_CLASS_INFRA)});
  EXPECT_EQ(JobExitCode(job, GatePolicy{}), kExitNotValidated);
  EXPECT_NE(FormatReport(job, "junit").find("<error message=\"not validated: infrastructure\""), std::string::npos);

  job = JobOf({Task(v1::VERDICT_PASS, v1::VERDICT_PASS, v1::TRIAGE_CLASS_PASS)}, /*total=*/3);
  EXPECT_EQ(JobExitCode(job, GatePolicy{}), kExitNotValidated);
  EXPECT_NE(FormatReport(job, "markdown").find("**NOT VALIDATED: 2 of 3 tasks**"), std::string::npos)
      << FormatReport(job, "markdown");
  EXPECT_NE(FormatReport(job, "junit").find("tasks have no result"), std::string::npos);

  job = JobOf({Task(v1::VERDICT_PASS, v1::VERDICT_FAIL_MISMATCH, v1::TRIAGE_CLASS_PR_TOUCHED),
               Task(v1::VERDICT_ERROR, v1::VERDICT_ERROR, v1::TRIAGE_CLASS_PRE_EXISTING)});
  EXPECT_EQ(JobExitCode(job, GatePolicy{}), kExitFailed);
  job = JobOf({Task(v1::VERDICT_PASS, v1::VERDICT_PASS, v1::TRIAGE_CLASS_PASS)});
  EXPECT_EQ(JobExitCode(job, GatePolicy{}), kExitOk);
  EXPECT_EQ(FormatReport(job, "table").find("NOT VALIDATED"), std::string::npos);
}

TEST(NotValidated, RenderReportRefusesPartialJson) {
  v1::Job job = JobOf({Task(v1::VERDICT_PASS, v1::VERDICT_PASS, v1::TRIAGE_CLASS_PASS)});
  ASSERT_TRUE(RenderReport(job, "json").ok());
  job.mutable_spec()->mutable_deadline()->set_seconds(1'000'000'000'000'000);
  const absl::StatusOr<std::string> r = RenderReport(job, "json");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace mxval
