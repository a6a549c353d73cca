#include "service/worker/worker.h"

#include "service/worker/devices.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "service/worker/child_results.h"
#include "service/worker/child_runner.h"
#include "service/worker/python_host.h"

namespace mxval {
namespace worker {

Worker::Worker(WorkerOptions options) : options_(std::move(options)) {}
Worker::~Worker() = default;

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(WorkerOptions o) {
  if (o.coordinator.empty()) return absl::InvalidArgumentError("coordinator: empty address");
  if (o.child_argv.empty()) return absl::InvalidArgumentError("child_argv: empty");
  if (o.worker_id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    o.worker_id = absl::StrCat(host, "-", getpid());
  }
  if (o.devices.empty()) o.devices.push_back(HostCpuDevice());
  std::unique_ptr<Worker> w(new Worker(std::move(o)));
  w->channel_ = grpc::CreateChannel(w->options_.coordinator, w->options_.credentials
                                                                  ? w->options_.credentials
                                                                  : grpc::InsecureChannelCredentials());
  w->stub_ = v1::WorkerService::NewStub(w->channel_);
  if (!w->options_.library_cache.dir.empty()) {
    Worker* self = w.get();
    w->cache_ = std::make_unique<LibraryCache>(
        w->options_.library_cache,
        [self](const std::string& sha256, const std::function<absl::Status(int64_t, v1::LibraryFormat)>& begin,
               const std::function<absl::Status(absl::string_view)>& write) {
          return self->FetchContent(sha256, begin, write);
        });
  }
  absl::MutexLock l(&w->mu_);
  w->consecutive_failures_.assign(w->options_.devices.size(), 0);
  return w;
}

std::unique_ptr<grpc::ClientContext> Worker::Ctx(absl::Duration d) const {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d));
  return c;
}

absl::Status Worker::Register() {
  v1::RegisterWorkerRequest req;
  req.set_worker_id(options_.worker_id);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  req.mutable_capabilities()->set_hostname(host);
  {
    absl::MutexLock l(&mu_);
    for (const v1::DeviceInfo& d : options_.devices) *req.mutable_capabilities()->add_devices() = d;
  }
  for (const auto& lib : options_.libraries) *req.mutable_capabilities()->add_libraries() = lib;
  if (options_.python.has_value()) *req.mutable_capabilities()->mutable_python() = *options_.python;
  v1::RegisterWorkerResponse resp;
  const grpc::Status st = stub_->RegisterWorker(Ctx(options_.rpc_timeout).get(), req, &resp);
  if (!st.ok()) return absl::UnavailableError(absl::StrCat("register: ", st.error_message()));
  // Heartbeat at the coordinator's interval, but at least 3 times per lease:
  // a lease survives two lost heartbeats, and a lost lease's child is
  // stopped within one interval.
  int64_t ms = resp.heartbeat_interval().seconds() * 1000 + resp.heartbeat_interval().nanos() / 1000000;
  const int64_t lease_ms = resp.lease_duration().seconds() * 1000 + resp.lease_duration().nanos() / 1000000;
  if (lease_ms > 0) ms = ms > 0 ? std::min(ms, lease_ms / 3) : lease_ms / 3;
  bool changed = false;
  if (ms > 0) changed = heartbeat_ms_.exchange(std::max<int64_t>(ms, 50)) != std::max<int64_t>(ms, 50);
  if (!registered_once_.exchange(true) || changed) {
    std::cerr << absl::StrCat("mxval worker: registered as ", options_.worker_id, " with ", options_.coordinator,
                              "; heartbeat every ", absl::FormatDuration(absl::Milliseconds(heartbeat_ms_.load())),
                              " (lease ", absl::FormatDuration(absl::Milliseconds(lease_ms)), ")\n");
  }
  return absl::OkStatus();
}

bool Worker::device_healthy(int index) const {
  absl::MutexLock l(&mu_);
  for (const v1::DeviceInfo& d : options_.devices)
    if (d.index() == index) return d.healthy();
  return false;
}

absl::Status Worker::Run() {
  // The coordinator may not be up yet (or restarting): retry registration.
  for (int attempt = 0; !shutting_down_; ++attempt) {
    if (Register().ok()) break;
    absl::SleepFor(std::min(absl::Milliseconds(100) * (1 << std::min(attempt, 5)), absl::Seconds(3)));
  }
  if (options_.metrics) {
    absl::MutexLock l(&mu_);
    for (const v1::DeviceInfo& d : options_.devices) options_.metrics->DeviceHealth(d.index(), d.arch(), d.healthy());
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < options_.devices.size(); ++i) threads.emplace_back(&Worker::Executor, this, static_cast<int>(i));
  std::thread hb(&Worker::Heartbeats, this);
  for (auto& t : threads) t.join();
  {
    absl::MutexLock l(&mu_);
    shutting_down_ = true;  // every device went unhealthy, or Drain()
  }
  hb.join();
  return absl::OkStatus();
}

void Worker::Drain() {
  absl::MutexLock l(&mu_);
  shutting_down_ = true;
  CancelPollsLocked();
}

void Worker::CancelPollsLocked() {
  for (grpc::ClientContext* poll : polls_) poll->TryCancel();
}

void Worker::AwaitUndrain() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](Worker* w) { return w->shutting_down_.load() || !w->coordinator_drain_.load(); }, this));
}

void Worker::Abandon(const std::string& lease_id, const std::string& task_id, const std::string& reason) {
  ++abandoned_;
  if (options_.metrics) options_.metrics->TaskAbandoned(reason);
  std::cerr << (reason == "lost"
                    ? absl::StrCat("mxval worker: lease ", lease_id, " lost (cancelled or expired): stopped task ",
                                   task_id, "\n")
                    : absl::StrCat("mxval worker: lease ", lease_id,
                                   " lost (the coordinator did not accept the result): dropped task ", task_id, "\n"));
}

void Worker::Heartbeats() {
  while (!shutting_down_ || [&] {
    absl::MutexLock l(&mu_);
    return !running_leases_.empty();
  }()) {
    v1::HeartbeatRequest req;
    req.set_worker_id(options_.worker_id);
    {
      absl::MutexLock l(&mu_);
      for (const auto& [id, cancel] : running_leases_) req.add_lease_ids(id);
    }
    v1::HeartbeatResponse resp;
    const grpc::Status st = stub_->Heartbeat(Ctx(options_.rpc_timeout).get(), req, &resp);
    if (st.ok()) {
      // The coordinator stopped these (cancelled job, expired lease): kill
      // their children now; their executors report nothing for them.
      {
        absl::MutexLock l(&mu_);
        for (const std::string& id : resp.lost_lease_ids()) {
          if (auto it = running_leases_.find(id); it != running_leases_.end()) it->second->Cancel();
        }
      }
      if (coordinator_drain_.load() != resp.drain()) {
        {
          absl::MutexLock l(&mu_);
          coordinator_drain_ = resp.drain();
          if (resp.drain()) CancelPollsLocked();
        }
        if (options_.metrics) options_.metrics->Drained(resp.drain());
        std::cerr << (resp.drain() ? "mxval worker: drained by the coordinator: running tasks finish, no new leases "
                                     "(mxval drain --undrain resumes)\n"
                                   : "mxval worker: undrained by the coordinator: leasing again\n");
      }
    } else if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
               st.error_code() == grpc::StatusCode::NOT_FOUND) {
      // The coordinator does not know this worker (it restarted, or dropped
      // the registration): register again; running leases are renewed by the
      // next heartbeat if the coordinator still holds them.
      std::cerr << absl::StrCat("mxval worker: heartbeat refused (", st.error_message(), "): registering again\n");
      (void)Register();
    }
    // Sleep one interval, but notice a finished shutdown promptly.
    const absl::Time next = absl::Now() + absl::Milliseconds(heartbeat_ms_.load());
    while (absl::Now() < next) {
      if (shutting_down_) {
        absl::MutexLock l(&mu_);
        if (running_leases_.empty()) return;
      }
      absl::SleepFor(std::min(absl::Milliseconds(50), next - absl::Now()));
    }
  }
}

bool Worker::Report(const std::string& lease_id, const v1::TaskResult& result, int device_index,
                    v1::LeaseTaskResponse* next, bool* accepted) {
  v1::ReportResultRequest req;
  req.set_worker_id(options_.worker_id);
  req.set_lease_id(lease_id);
  *req.mutable_result() = result;
  if (next != nullptr) req.mutable_next()->set_device_index(device_index);
  // Retry until the coordinator answers (it may be restarting); "not accepted"
  // is an answer: the lease was lost and someone else will run the task. So
  // is a refusal (the report itself is wrong, or this worker may not make
  // it): retrying it would only block this device. A coordinator that does
  // not know this worker (restarted) gets a registration, then the report
  // again.
  *accepted = false;
  int reregistered = 0;
  for (int attempt = 0;; ++attempt) {
    v1::ReportResultResponse resp;
    const grpc::Status st = stub_->ReportResult(Ctx(options_.rpc_timeout).get(), req, &resp);
    if (st.ok()) {
      *accepted = resp.accepted();
      if (next != nullptr && resp.next().has_task()) {
        *next = std::move(*resp.mutable_next());
        return true;
      }
      return false;
    }
    const grpc::StatusCode code = st.error_code();
    // Only a registration that went through counts: one that failed (the
    // coordinator is still starting) is retried like any transient error, so
    // a result the coordinator would accept is never dropped for it.
    if ((code == grpc::StatusCode::FAILED_PRECONDITION || code == grpc::StatusCode::NOT_FOUND) && reregistered < 2) {
      if (Register().ok()) {
        ++reregistered;
        continue;
      }
      absl::SleepFor(std::min(absl::Milliseconds(50) * (1 << std::min(attempt, 6)), absl::Seconds(3)));
      continue;
    }
    const bool transient = code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                           code == grpc::StatusCode::RESOURCE_EXHAUSTED || code == grpc::StatusCode::ABORTED ||
                           code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN ||
                           code == grpc::StatusCode::CANCELLED;
    if (!transient) return false;
    absl::SleepFor(std::min(absl::Milliseconds(50) * (1 << std::min(attempt, 6)), absl::Seconds(3)));
  }
}

absl::Status Worker::FetchContent(const std::string& sha256,
                                  const std::function<absl::Status(int64_t, v1::LibraryFormat)>& begin,
                                  const std::function<absl::Status(absl::string_view)>& write) {
  v1::FetchKernelLibraryRequest req;
  req.set_worker_id(options_.worker_id);
  req.set_sha256(sha256);
  // Long enough for the largest library over a slow link; a dead
  // coordinator still ends it (keepalive-free: the deadline does).
  auto ctx = Ctx(absl::Minutes(10));
  auto reader = stub_->FetchKernelLibrary(ctx.get(), req);
  v1::FetchKernelLibraryResponse m;
  absl::Status st;
  for (bool first = true; st.ok() && reader->Read(&m); first = false) {
    if (first) st = begin(m.content_bytes(), m.format());
    if (st.ok()) st = write(m.chunk());
  }
  if (!st.ok()) {
    ctx->TryCancel();
    while (reader->Read(&m)) {
    }
    (void)reader->Finish();
    return st;
  }
  const grpc::Status g = reader->Finish();
  if (g.ok()) return absl::OkStatus();
  // Only a coordinator that cannot be reached (or is overloaded) is worth
  // another worker's try; NOT_FOUND (registered without content) falls back
  // to --kernel-dir; anything else (an older coordinator without the RPC, a
  // refused certificate) is the side's error, said as is.
  const auto code = static_cast<absl::StatusCode>(static_cast<int>(g.error_code()));
  const bool transient = code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
                         code == absl::StatusCode::kResourceExhausted || code == absl::StatusCode::kAborted;
  return absl::Status(code == absl::StatusCode::kNotFound || !transient ? code : absl::StatusCode::kUnavailable,
                      absl::StrCat("fetching library content ", sha256, " from the coordinator: ",
                                   absl::StatusCodeToString(code), ": ", g.error_message()));
}

std::map<std::string, std::string> Worker::EnsureLibraries(const v1::TaskSpec& task, std::string* infra) {
  std::map<std::string, std::string> side_errors;
  if (cache_ == nullptr) return side_errors;
  for (const auto& [side, ref] : {std::pair<std::string, const v1::KernelRef*>{"baseline", &task.baseline_kernel()},
                                  {"candidate", &task.candidate_kernel()}}) {
    if (ref->sha256().empty()) continue;  // a built-in library
    const absl::Status st = cache_->Ensure(*ref);
    if (st.ok() || absl::IsNotFound(st)) continue;  // not found: registered without content, --kernel-dir only
    if (absl::IsUnavailable(st)) {
      *infra = std::string(st.message());
      continue;
    }
    side_errors[side] = std::string(st.message());
  }
  return side_errors;
}

namespace {

// Gives `run` the library fetch's error (its verdict ERROR) when its child
// could not load the library either.
void ApplyFetchError(const std::string& error, v1::KernelRun* run) {
  if (run->accuracy().verdict() == v1::VERDICT_PASS) return;
  v1::Accuracy* a = run->mutable_accuracy();
  a->set_verdict(v1::VERDICT_ERROR);
  a->set_reason(a->reason().empty() ? error : absl::StrCat(error, "; ", a->reason()));
}

// Empties `dir` (a serving child's scratch directory after the child ended).
void ClearDirectory(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) std::filesystem::remove_all(e.path(), ec);
}

}  // namespace

void Worker::Executor(int slot) {
  int index;
  {
    absl::MutexLock l(&mu_);
    index = options_.devices[slot].index();
  }
  v1::LeaseTaskResponse next;
  bool have_next = false;
  // This device's serving Python child (options_.python_serving), started
  // by its first Python task and ended when the executor returns, and its
  // scratch directory, removed then.
  std::unique_ptr<PersistentChild> python_child;
  std::string python_scratch;
  struct RemoveScratch {
    std::unique_ptr<PersistentChild>& child;
    std::string& dir;
    ~RemoveScratch() {
      child.reset();
      if (!dir.empty()) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
    }
  } remove_scratch{python_child, python_scratch};
  while (!shutting_down_ || have_next) {
    {
      absl::MutexLock l(&mu_);
      if (!options_.devices[slot].healthy()) return;
    }
    if (!have_next && coordinator_drain_) {
      AwaitUndrain();  // the daemon stays up, idle, until undrained or shut down
      continue;
    }
    v1::LeaseTaskResponse lease;
    if (have_next) {  // handed out with the previous report
      lease = std::move(next);
      next.Clear();
      have_next = false;
    } else {
      v1::LeaseTaskRequest lr;
      lr.set_worker_id(options_.worker_id);
      lr.set_device_index(index);
      lr.mutable_max_wait()->set_seconds(absl::ToInt64Seconds(options_.long_poll));
      lr.mutable_max_wait()->set_nanos(
          static_cast<int32_t>(absl::ToInt64Nanoseconds(options_.long_poll) % 1000000000));
      // The poll is registered so that a drain (or shutdown) cancels it: a
      // drained worker must not take a task from a poll that began earlier.
      const std::unique_ptr<grpc::ClientContext> ctx = Ctx(options_.long_poll + options_.rpc_timeout);
      {
        absl::MutexLock l(&mu_);
        if (coordinator_drain_ || shutting_down_) continue;
        polls_.insert(ctx.get());
      }
      const grpc::Status st = stub_->LeaseTask(ctx.get(), lr, &lease);
      {
        absl::MutexLock l(&mu_);
        polls_.erase(ctx.get());
      }
      if (st.error_code() == grpc::StatusCode::CANCELLED && (coordinator_drain_ || shutting_down_)) continue;
      if (!st.ok()) {
        if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION || st.error_code() == grpc::StatusCode::NOT_FOUND) {
          (void)Register();
        }
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      if (!lease.has_task()) continue;
    }
    std::shared_ptr<ChildCancel> cancel;  // the one a heartbeat fires if the lease is lost
    {
      absl::MutexLock l(&mu_);
      std::shared_ptr<ChildCancel>& c = running_leases_[lease.lease_id()];
      if (c == nullptr) c = std::make_shared<ChildCancel>();
      cancel = c;
    }
    std::string fetch_infra;
    const std::map<std::string, std::string> fetch_errors = EnsureLibraries(lease.task(), &fetch_infra);
    ChildOptions co;
    co.argv = options_.child_argv;
    const bool python = HasPythonSide(lease.task());
    if (python && !options_.python_child_argv.empty()) {
      co.argv = options_.python_child_argv;
      co.argv.insert(co.argv.end(), options_.child_argv.begin() + std::min<size_t>(2, options_.child_argv.size()),
                     options_.child_argv.end());
    }
    if (!options_.device_runtime.empty()) {
      co.argv.insert(co.argv.end(), {"--runtime", options_.device_runtime, "--device", absl::StrCat(index)});
    }
    co.timeout = options_.task_timeout;
    co.cancel = cancel.get();
    absl::StatusOr<ChildOutcome> outcome = absl::FailedPreconditionError(options_.python_unavailable);
    if (!fetch_infra.empty()) {
      outcome = absl::UnavailableError(fetch_infra);  // another worker (or a later try) may reach the coordinator
    } else if (python && !options_.python_child_argv.empty() && options_.python_serving) {
      if (python_child == nullptr) {
        // The serving child copies library trees here; it ends without
        // cleaning up (os._exit, SIGKILL), so the worker does.
        std::string tmpl = absl::StrCat(std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp",
                                        "/mxval-worker-XXXXXX");
        if (mkdtemp(tmpl.data()) != nullptr) {
          python_scratch = tmpl;
          co.argv.insert(co.argv.end(), {"--scratch-dir", python_scratch});
        }
        python_child = std::make_unique<PersistentChild>(co, options_.python_tasks_per_child);
      }
      outcome = python_child->Run(lease.task().SerializeAsString(), options_.task_timeout, cancel.get());
      if (!python_child->running()) ClearDirectory(python_scratch);
    } else if (!python || !options_.python_child_argv.empty()) {
      outcome = RunChild(co, lease.task().SerializeAsString());
    }
    if (cancel->cancelled()) {
      // The coordinator took the lease away (a heartbeat said so) and the
      // child was stopped, or it finished just then: its result would not
      // be recorded, and the task belongs to nobody or to another worker.
      {
        absl::MutexLock l(&mu_);
        running_leases_.erase(lease.lease_id());
      }
      Abandon(lease.lease_id(), lease.task().task_id(), "lost");
      continue;
    }
    v1::TaskResult result;
    bool infra = true;
    std::string detail;
    std::vector<v1::TaskResult> written;
    if (outcome.ok()) written = ParseChildResults(outcome->out);
    if (!outcome.ok()) {
      detail = std::string(outcome.status().message());
    } else if (!written.empty()) {
      // The last complete message. From a child that did not end cleanly it
      // may be the checkpoint written before the roofline: both sides
      // checked and timed, the roofline not measured (its note says so, and
      // how the child ended). The task is done, not an infrastructure failure.
      infra = false;
      result = std::move(written.back());
      // The result is the leased task's (the child ran the TaskSpec it was
      // given); one that names none is filed under it, one that names
      // another task is the coordinator's to refuse.
      if (result.task_id().empty()) result.set_task_id(lease.task().task_id());
      if (auto e = fetch_errors.find("baseline"); e != fetch_errors.end()) ApplyFetchError(e->second, result.mutable_baseline());
      if (auto e = fetch_errors.find("candidate"); e != fetch_errors.end()) {
        ApplyFetchError(e->second, result.mutable_candidate());
      }
      if (!outcome->success && result.roofline().note() == kRooflineInterruptedNote) {
        absl::StrAppend(result.mutable_roofline()->mutable_note(), " (", outcome->Describe(), ")");
      }
    } else {
      detail = outcome->Describe();
      if (outcome->success) {
        absl::StrAppend(&detail, ", but no task result on stdout (", outcome->out.size(), " bytes; expected the header \"",
                        absl::StripSuffix(kChildResultsHeader, "\n"),
                        "\" and delimited TaskResults: is the child an older mxval?)");
      }
      if (!outcome->stderr_tail.empty()) absl::StrAppend(&detail, "; stderr tail: ", outcome->stderr_tail);
    }
    if (options_.metrics) {
      const bool crashed = outcome.ok() && (outcome->signal != 0 || outcome->timed_out);
      if ((infra && !outcome.ok()) || crashed) options_.metrics->ChildCrash();
      if (!infra) {
        options_.metrics->TaskResult(result);
        const bool pass = result.baseline().accuracy().verdict() == v1::VERDICT_PASS &&
                          result.candidate().accuracy().verdict() == v1::VERDICT_PASS;
        options_.metrics->TaskOutcome(pass ? "pass" : "fail");
      } else {
        options_.metrics->TaskOutcome("infra");
      }
    }
    if (infra) {
      result.Clear();
      result.set_task_id(lease.task().task_id());
      v1::Attempt* a = result.add_attempts();
      a->set_worker_id(options_.worker_id);
      a->set_device_index(index);
      a->set_failure(v1::FAILURE_CLASS_INFRA);
      a->set_failure_detail(detail);
    }
    // Ask for the next lease in the same call unless this device is about to
    // stop (shutting down, drained, or this failure makes it unhealthy).
    bool ask_next = !shutting_down_.load() && !coordinator_drain_.load();
    // A crash or hang of a task that runs a registered library (a pull
    // request's build: compiled or Python) is that build's doing, not the
    // device's: it does not count towards marking the device unhealthy, or a
    // crashing kernel under test would take every device out of service.
    const bool against_device = infra && lease.task().baseline_kernel().sha256().empty() &&
                                lease.task().candidate_kernel().sha256().empty();
    {
      absl::MutexLock l(&mu_);
      if (against_device && consecutive_failures_[slot] + 1 >= options_.unhealthy_after) ask_next = false;
    }
    {
      // The next lease counts as running from the moment it is granted, so
      // heartbeats renew it.
      absl::MutexLock l(&mu_);
      running_leases_.erase(lease.lease_id());
    }
    bool accepted = false;
    have_next = Report(lease.lease_id(), result, index, ask_next ? &next : nullptr, &accepted);
    if (!accepted) {
      Abandon(lease.lease_id(), lease.task().task_id(), "not_accepted");
    } else {
      ++(infra ? infra_failures_ : completed_);
    }
    if (have_next) {
      absl::MutexLock l(&mu_);
      running_leases_[next.lease_id()] = std::make_shared<ChildCancel>();
    }
    bool now_unhealthy = false;
    {
      absl::MutexLock l(&mu_);
      int& fails = consecutive_failures_[slot];
      if (!infra) fails = 0;
      if (against_device) ++fails;
      if (fails >= options_.unhealthy_after && options_.devices[slot].healthy()) {
        options_.devices[slot].set_healthy(false);
        now_unhealthy = true;
      }
    }
    if (now_unhealthy) {
      if (options_.metrics) options_.metrics->DeviceHealth(index, options_.devices[slot].arch(), false);
      (void)Register();  // advertise the device as unhealthy
      return;
    }
  }
}

}  // namespace worker
}  // namespace mxval
