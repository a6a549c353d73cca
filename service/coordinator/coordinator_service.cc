#include "service/coordinator/coordinator_service.h"

#include "common/digest.h"

#include <algorithm>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "service/coordinator/request_bounds.h"
#include "service/triage/kernel_triage.h"
#include "service/triage/triage_config.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/health_check_service_interface.h"
#include "service/auth/undecodable_request.h"

namespace mxval {
namespace coordinator {
namespace {

void ToProto(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t us = absl::ToUnixMicros(t);
  out->set_seconds(us / 1000000);
  out->set_nanos(static_cast<int32_t>((us % 1000000) * 1000));
}

void ToProto(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t us = absl::ToInt64Microseconds(d);
  out->set_seconds(us / 1000000);
  out->set_nanos(static_cast<int32_t>((us % 1000000) * 1000));
}

v1::JobState ToProto(JobState s) {
  switch (s) {
    case JobState::kQueued: return v1::JOB_STATE_QUEUED;
    case JobState::kRunning: return v1::JOB_STATE_RUNNING;
    case JobState::kDone: return v1::JOB_STATE_DONE;
    case JobState::kCancelled: return v1::JOB_STATE_CANCELLED;
    case JobState::kExpired: return v1::JOB_STATE_EXPIRED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

bool Final(v1::JobState s) {
  return s == v1::JOB_STATE_DONE || s == v1::JOB_STATE_CANCELLED || s == v1::JOB_STATE_EXPIRED;
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

}  // namespace

bool TaskFailed(const TaskRecord& t) {
  if (t.infra_failed) return true;
  if (!t.has_result) return false;
  v1::TaskResult r;
  r.ParseFromString(t.result);
  // A side declined by its kernel's can_implement did not fail, unless the
  // candidate declines what the baseline ran (the change lost that case)
  // outside a layout probe, which a kernel may decline.
  const v1::KernelRun &b = r.baseline(), &c = r.candidate();
  const auto ok = [](const v1::KernelRun& k) { return k.accuracy().verdict() == v1::VERDICT_PASS || k.declined(); };
  return !ok(b) || !ok(c) || (c.declined() && !b.declined() && !r.shape().layout_probe());
}

SchedulerOptions WithFailurePredicate(SchedulerOptions o) {
  o.is_failed = TaskFailed;
  return o;
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(s.code())), std::string(s.message()));
}

Coordinator::Coordinator(const Clock* clock, Scheduler* scheduler, CoordinatorOptions options)
    : clock_(clock), scheduler_(scheduler), options_(std::move(options)) {
  rules_ = options_.log_rules;
  if (rules_ == nullptr) {
    own_rules_ = std::move(*triage::LogClassifier::Create(triage::DefaultLogRules()));
    rules_ = own_rules_.get();
  }
  libraries_ = options_.libraries;
  if (libraries_ == nullptr) {
    own_libraries_ = std::move(*LibraryRegistry::Create(nullptr));
    libraries_ = own_libraries_.get();
  }
  content_ = options_.library_content;
  if (content_ == nullptr) {
    own_content_ = std::make_unique<LibraryContent>(nullptr, LibraryContentOptions{});
    content_ = own_content_.get();
  }
  ownership_ = options_.ownership;
  log_ownership_ = options_.ownership;
  if (ownership_ == nullptr) {
    own_ownership_ = std::move(*triage::Ownership::Create(triage::DefaultOwnership()));
    ownership_ = own_ownership_.get();
    // The built-in map describes this repository's kernels; a CI job of
    // another project gets no map rather than a wrong one.
    no_ownership_ = triage::Ownership::Empty();
    log_ownership_ = no_ownership_.get();
  }
}

// The worker's report with the coordinator's authoritative attempts (for an
// infrastructure-failed task, the attempts alone), and its triage.
v1::TaskResult Coordinator::ResultOf(const TaskRecord& t, const v1::JobSpec& spec) const {
  v1::TaskResult r;
  v1::TaskSpec task;
  task.ParseFromString(t.input.payload);
  if (t.has_result) r.ParseFromString(t.result);
  if (!t.has_result) {
    *r.mutable_shape() = task.shape();
    r.set_m(task.m());
    r.set_arch(task.arch());
  }
  r.set_task_id(t.task_id);
  r.set_reused(t.reused);
  r.clear_attempts();
  r.clear_triage();
  for (const AttemptRecord& a : t.attempts) {
    v1::Attempt* p = r.add_attempts();
    p->set_worker_id(a.worker_id);
    p->set_device_index(a.device);
    ToProto(a.started, p->mutable_started());
    if (a.finished != absl::InfinitePast()) ToProto(a.finished, p->mutable_finished());
    p->set_failure(a.infra_failure ? v1::FAILURE_CLASS_INFRA : v1::FAILURE_CLASS_NONE);
    p->set_failure_detail(a.detail);
  }
  if (t.state == TaskState::kDone) {
    v1::TaskResult first;
    const bool has_first = !t.first_result.empty() && first.ParseFromString(t.first_result);
    triage::KernelTaskFacts f{&spec, &task, &r, has_first ? &first : nullptr, t.infra_failed};
    *r.mutable_triage() = triage::ClassifyKernelTask(f, *ownership_);
  }
  return r;
}

v1::Job Coordinator::JobHead(const JobStatus& status) const {
  v1::Job job;
  job.set_job_id(status.job_id);
  job.set_request_id(ClientRequestId(status.request_id));
  job.mutable_spec()->ParseFromString(status.payload);
  job.set_state(ToProto(status.state));
  ToProto(status.created, job.mutable_created());
  if (status.finished) ToProto(*status.finished, job.mutable_finished());
  v1::JobProgress* pr = job.mutable_progress();
  pr->set_tasks_total(status.tasks_total);
  pr->set_tasks_done(status.tasks_done);
  pr->set_tasks_running(status.tasks_running);
  pr->set_tasks_failed(status.tasks_failed);
  return job;
}

absl::StatusOr<v1::Job> Coordinator::BuildJob(const std::string& job_id, bool include_results) const {
  auto status = scheduler_->GetJob(job_id);
  if (!status.ok()) return status.status();
  v1::Job job = JobHead(*status);
  if (!include_results) return job;  // O(1): counters are kept by the scheduler
  auto tasks = scheduler_->GetTasks(job_id);
  if (!tasks.ok()) return tasks.status();
  for (const TaskRecord& t : *tasks) {
    if (t.state == TaskState::kDone) *job.add_results() = ResultOf(t, job.spec());
  }
  return job;
}

absl::StatusOr<auth::Caller> Coordinator::Authorize(grpc::ServerContext* ctx, v1::Role role, const char* method,
                                                    bool rate_limited) {
  auto caller = options_.authorizer == nullptr ? absl::StatusOr<auth::Caller>(auth::Caller{"anonymous", v1::ROLE_ADMIN})
                                               : options_.authorizer->Check(ctx, role, method);
  if (!caller.ok() || !rate_limited || options_.rpc_rate_per_second <= 0) return caller;
  absl::Duration wait;
  bool ok;
  {
    absl::MutexLock l(&quota_mu_);
    ClientQuota& q = quotas_[caller->principal];
    if (!q.calls) q.calls.emplace(options_.rpc_rate_per_second, std::max(10.0, 2 * options_.rpc_rate_per_second));
    ok = q.calls->TryTake(clock_->Now(), &wait);
  }
  if (ok) return caller;
  if (options_.metrics) options_.metrics->CallLimited(method);
  if (ctx) ctx->AddTrailingMetadata("retry-after-ms", absl::StrCat(absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1)))));
  return absl::ResourceExhaustedError(absl::StrCat(method, ": client '", caller->principal, "' is over ",
                                                   options_.rpc_rate_per_second, " calls per second; retry in ",
                                                   absl::FormatDuration(absl::Ceil(wait, absl::Milliseconds(1)))));
}

absl::Status Coordinator::AuthorizeWorker(const grpc::ServerContext* ctx, const std::string& worker_id,
                                          const char* method) const {
  if (options_.authorizer == nullptr) return absl::OkStatus();
  return options_.authorizer->CheckWorker(ctx, worker_id, method);
}

#define MXVAL_AUTHORIZE(var, role, method)                 \
  auto var = Authorize(ctx, role, method);                 \
  if (!var.ok()) return ToGrpc(var.status())
#define MXVAL_AUTHORIZE_WORKER(worker_id, method)                                   \
  if (absl::Status a_ = AuthorizeWorker(ctx, worker_id, method); !a_.ok()) return ToGrpc(a_)

std::string RequestKey(const std::string& principal, const std::string& request_id) {
  return request_id.empty() ? std::string() : absl::StrCat(principal, std::string(1, kRequestKeySeparator), request_id);
}

std::string ClientRequestId(const std::string& key) {
  const size_t sep = key.find(kRequestKeySeparator);
  return sep == std::string::npos ? key : key.substr(sep + 1);
}

void Coordinator::Denied(const std::string& reason, const char* method, const std::string& who) const {
  if (options_.metrics) options_.metrics->AuthDenied(reason);
  if (options_.log) {
    options_.log(absl::StrCat("denied ", method, " for '", absl::CHexEscape(who.substr(0, 256)), "' (", reason, ")"));
  }
}

absl::Status Coordinator::Registered(const std::string& worker_id, const char* method) const {
  {
    absl::MutexLock l(&mu_);
    if (workers_.contains(worker_id)) return absl::OkStatus();
  }
  Denied("unregistered_worker", method, worker_id);
  return absl::FailedPreconditionError(
      absl::StrCat("worker_id: '", absl::CHexEscape(worker_id.substr(0, 256)), "' is not registered (RegisterWorker first)"));
}

std::optional<std::string> Coordinator::LegacyRequest(const std::string& request_id, const std::string& principal) const {
  if (request_id.empty()) return std::nullopt;
  auto job_id = scheduler_->FindRequest(request_id);
  if (!job_id) return std::nullopt;
  auto job = scheduler_->GetJob(*job_id);
  v1::JobSpec spec;
  if (!job.ok() || !spec.ParseFromString(job->payload) || spec.owner() != principal) return std::nullopt;
  return job_id;
}

absl::Status Coordinator::SameSpecAsFirst(const std::string& job_id, const v1::JobSpec& spec,
                                          const std::string& request_id) const {
  auto first = scheduler_->GetJob(job_id);
  if (!first.ok()) return first.status();
  v1::JobSpec before;
  if (!before.ParseFromString(first->payload)) return absl::InternalError(absl::StrCat("job ", job_id, ": stored spec unreadable"));
  google::protobuf::util::MessageDifferencer diff;
  std::string report;
  diff.ReportDifferencesToString(&report);
  if (diff.Compare(before, spec)) return absl::OkStatus();
  std::string first_line = report.substr(0, report.find('\n'));
  if (first_line.size() > 300) first_line = first_line.substr(0, 300) + "...";
  return absl::AlreadyExistsError(absl::StrCat("request_id: '", request_id, "' was accepted as job ", job_id,
                                               " with a different spec (", first_line,
                                               "); a retry must send the same spec, a new job a new request id"));
}

grpc::Status Coordinator::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                    v1::SubmitJobResponse* resp) {
  // SubmitJob has its own limits (CheckSubmitLimits), which never refuse an idempotent retry.
  auto caller = Authorize(ctx, v1::ROLE_SUBMITTER, "SubmitJob", /*rate_limited=*/false);
  if (!caller.ok()) return ToGrpc(caller.status());
  if (req->request_id().size() > 256) return ToGrpc(absl::InvalidArgumentError("request_id: longer than 256 bytes"));
  if (size_t at = FindControlCharacter(req->request_id()); at != absl::string_view::npos) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat("request_id: control character at byte ", at)));
  }
  auto plan = PlanJob(req->spec(), options_.planner, libraries_->Snapshot(), PythonPools());
  if (!plan.ok()) {
    if (options_.metrics) options_.metrics->JobRejected(absl::IsInvalidArgument(plan.status()) ? "invalid" : "exhausted");
    return ToGrpc(plan.status());
  }
  JobInput in;
  // Request ids are per owner: another principal's equal id names another job.
  in.request_id = RequestKey(caller->principal, req->request_id());
  if (!in.request_id.empty() && !scheduler_->FindRequest(in.request_id) &&
      LegacyRequest(req->request_id(), caller->principal)) {
    in.request_id = req->request_id();
  }
  in.priority = plan->priority;
  in.deadline = plan->deadline;
  in.reuse_results = req->spec().reuse_results();
  v1::JobSpec owned = req->spec();
  owned.set_owner(caller->principal);  // whoever the client claims, the job is the caller's
  in.payload = owned.SerializeAsString();
  in.tasks.reserve(plan->tasks.size());
  for (const PlannedTask& t : plan->tasks) in.tasks.push_back({t.spec.arch(), t.dedup_key, t.spec.SerializeAsString()});
  if (!scheduler_->FindRequest(in.request_id)) {  // a retry of an accepted job is never limited
    absl::Duration wait;
    if (absl::Status lim = CheckSubmitLimits(caller->principal, &wait); !lim.ok()) {
      if (options_.metrics) options_.metrics->JobRejected("client_limit");
      if (ctx) ctx->AddTrailingMetadata("retry-after-ms", absl::StrCat(absl::ToInt64Milliseconds(wait)));
      return ToGrpc(lim);
    }
  }
  auto id = scheduler_->Submit(in);
  // Under a request id the job returned may be an earlier one (a retry, or a
  // concurrent first submit, here or through another coordinator): it must
  // have this spec, or the new spec would be silently dropped.
  if (id.ok() && !in.request_id.empty()) {
    if (absl::Status same = SameSpecAsFirst(*id, owned, req->request_id()); !same.ok()) return ToGrpc(same);
  }
  if (id.ok()) {
    absl::MutexLock l(&quota_mu_);
    quotas_[caller->principal].jobs.push_back(*id);
  }
  if (!id.ok()) {
    if (options_.metrics) {
      options_.metrics->JobRejected(absl::IsResourceExhausted(id.status()) ? "exhausted" : "unavailable");
    }
    return ToGrpc(id.status());
  }
  if (options_.metrics) options_.metrics->JobSubmitted();
  auto job = BuildJob(*id, false);
  if (!job.ok()) return ToGrpc(job.status());
  *resp->mutable_job() = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status Coordinator::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* resp) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_VIEWER, "GetJob");
  if (req->job_id().empty()) return ToGrpc(absl::InvalidArgumentError("job_id: empty"));
  auto job = BuildJob(req->job_id(), req->include_results());
  if (!job.ok()) return ToGrpc(job.status());
  *resp = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status Coordinator::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                   grpc::ServerWriter<v1::JobEvent>* writer) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_VIEWER, "WatchJob");
  if (req->job_id().empty()) return ToGrpc(absl::InvalidArgumentError("job_id: empty"));
  // Only what changed is read each round (DoneSince), and the loop sleeps
  // until the scheduler changes (or a second passes, to notice a client that
  // went away), so a watch costs O(new results), not O(tasks), per round.
  size_t cursor = 0;
  std::string last_progress;
  while (!ctx->IsCancelled()) {
    const uint64_t seen = scheduler_->version();
    auto delta = scheduler_->DoneSince(req->job_id(), cursor);
    if (!delta.ok()) return ToGrpc(delta.status());
    cursor = delta->cursor;
    const v1::Job head = JobHead(delta->status);
    for (const TaskRecord& t : delta->done) {
      v1::JobEvent ev;
      *ev.mutable_job() = head;
      *ev.mutable_result() = ResultOf(t, head.spec());
      if (!writer->Write(ev)) return grpc::Status::OK;  // client went away
    }
    const std::string progress = absl::StrCat(head.state(), "/", head.progress().SerializeAsString());
    if (progress != last_progress) {
      v1::JobEvent ev;
      *ev.mutable_job() = head;
      if (!writer->Write(ev)) return grpc::Status::OK;
      last_progress = progress;
    }
    if (Final(head.state())) return grpc::Status::OK;
    scheduler_->AwaitChange(seen, options_.watch_step);
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled by the client");
}

grpc::Status Coordinator::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                                    v1::CancelJobResponse* resp) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_SUBMITTER, "CancelJob");
  if (caller->role < v1::ROLE_ADMIN) {  // submitters cancel their own jobs only
    auto status = scheduler_->GetJob(req->job_id());
    if (status.ok()) {
      v1::JobSpec spec;
      spec.ParseFromString(status->payload);
      if (spec.owner() != caller->principal) {
        options_.authorizer->Deny("not_owner", "CancelJob", caller->principal);
        return ToGrpc(absl::PermissionDeniedError(absl::StrCat("job_id: '", req->job_id(), "' belongs to '",
                                                               spec.owner(), "'; only its owner or an admin may cancel it")));
      }
    }
  }
  if (req->job_id().empty()) return ToGrpc(absl::InvalidArgumentError("job_id: empty"));
  if (absl::Status st = scheduler_->Cancel(req->job_id()); !st.ok()) return ToGrpc(st);
  auto job = BuildJob(req->job_id(), false);
  if (!job.ok()) return ToGrpc(job.status());
  *resp->mutable_job() = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status Coordinator::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                   v1::ListJobsResponse* resp) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_VIEWER, "ListJobs");
  if (req->page_size() < 0 || req->page_size() > 500) {
    return ToGrpc(absl::InvalidArgumentError("page_size: must be in [0, 500]"));
  }
  // A page token is the id of the last job of the previous page: jobs
  // submitted meanwhile (the listing is newest first) do not shift the next page.
  const std::vector<JobStatus> all = scheduler_->ListJobs();
  size_t i = 0;
  if (!req->page_token().empty()) {
    while (i < all.size() && all[i].job_id != req->page_token()) ++i;
    if (i == all.size()) return ToGrpc(absl::InvalidArgumentError("page_token: not a token this server issued"));
    ++i;
  }
  const int size = req->page_size() == 0 ? 50 : req->page_size();
  std::set<int> states(req->states().begin(), req->states().end());
  for (; i < all.size(); ++i) {
    const JobStatus& s = all[i];
    if (!states.empty() && !states.count(ToProto(s.state))) continue;
    if (!req->name_prefix().empty()) {
      v1::JobSpec spec;
      spec.ParseFromString(s.payload);
      if (!absl::StartsWith(spec.name(), req->name_prefix())) continue;
    }
    if (resp->jobs_size() == size) break;
    auto job = BuildJob(s.job_id, false);
    if (!job.ok()) continue;
    if (resp->jobs_size() > 0 && resp->ByteSizeLong() + job->ByteSizeLong() > options_.max_list_page_bytes) break;
    *resp->add_jobs() = std::move(*job);
  }
  if (i < all.size() && resp->jobs_size() > 0) resp->set_next_page_token(resp->jobs(resp->jobs_size() - 1).job_id());
  return grpc::Status::OK;
}

std::map<std::string, std::string> Coordinator::PythonPools() const {
  std::map<std::string, std::set<std::string>> envs;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [id, w] : workers_) {
      // Workers that are gone no longer say which environment runs a task.
      if (!w.capabilities.has_python() || StatusOf(id, w).state() == v1::WORKER_STATE_LOST) continue;
      const v1::PythonEnvironment& e = w.capabilities.python();
      const std::string env = absl::StrCat("python ", e.python_version(), " torch ", e.torch_version(), " triton ",
                                           e.triton_version(), " ", e.backend());
      for (const std::string& arch : w.archs) envs[arch].insert(env);
    }
  }
  std::map<std::string, std::string> pools;
  for (const auto& [arch, set] : envs) pools[arch] = absl::StrJoin(set, ";");
  return pools;
}

grpc::Status Coordinator::RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                                         v1::RegisterWorkerResponse* resp) {
  MXVAL_AUTHORIZE_WORKER(req->worker_id(), "RegisterWorker");
  if (absl::Status st = ValidateRegistration(*req); !st.ok()) {
    Denied("invalid_registration", "RegisterWorker", req->worker_id());
    return ToGrpc(st);
  }
  absl::MutexLock l(&mu_);
  if (!workers_.contains(req->worker_id()) && workers_.size() >= kMaxWorkers) {
    // Room is made only from workers that are gone and hold nothing.
    for (auto it = workers_.begin(); it != workers_.end();) {
      auto cur = it++;
      if (cur->second.leases.empty() && StatusOf(cur->first, cur->second).state() == v1::WORKER_STATE_LOST) {
        workers_.erase(cur);
      }
    }
    if (workers_.size() >= kMaxWorkers) {
      return ToGrpc(absl::ResourceExhaustedError(absl::StrCat("worker registry full (", kMaxWorkers, " workers)")));
    }
  }
  WorkerEntry& w = workers_[req->worker_id()];
  w.capabilities = req->capabilities();
  w.archs.clear();
  for (const v1::DeviceInfo& d : w.capabilities.devices())
    if (d.healthy()) w.archs.insert(d.arch());
  w.last_heartbeat = clock_->Now();
  // At least three heartbeats per lease, however short the lease.
  ToProto(std::min(options_.heartbeat_interval, options_.lease_duration / 3), resp->mutable_heartbeat_interval());
  ToProto(options_.lease_duration, resp->mutable_lease_duration());
  return grpc::Status::OK;
}

absl::StatusOr<std::set<std::string>> Coordinator::LeaseArchs(const std::string& worker_id, int device_index) {
  absl::MutexLock l(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("worker_id: '", worker_id, "' is not registered"));
  }
  const v1::DeviceInfo* device = nullptr;
  for (const v1::DeviceInfo& d : it->second.capabilities.devices()) {
    if (d.index() == device_index) device = &d;
  }
  if (device == nullptr) {  // FAILED_PRECONDITION: a worker whose registration is stale registers again
    return absl::FailedPreconditionError(absl::StrCat("device_index: ", device_index, " is not a device worker '",
                                                      absl::CHexEscape(worker_id), "' registered (register again)"));
  }
  it->second.last_heartbeat = clock_->Now();
  std::set<std::string> archs;
  if (it->second.draining || !device->healthy()) return archs;  // no task while draining or on a sick device
  archs.insert(device->arch());
  return archs;
}

bool Coordinator::TryLease(const std::string& worker_id, const std::set<std::string>& archs, int device,
                           v1::LeaseTaskResponse* resp) {
  if (archs.empty()) return false;
  auto lease = scheduler_->LeaseTask(worker_id, archs, device);
  if (!lease) return false;
  v1::TaskSpec* task = resp->mutable_task();
  task->ParseFromString(lease->payload);
  task->set_task_id(lease->task_id);
  task->set_job_id(lease->job_id);
  resp->set_lease_id(lease->lease_id);
  ToProto(lease->expiry, resp->mutable_lease_expires());
  absl::MutexLock l(&mu_);
  if (auto it = workers_.find(worker_id); it != workers_.end()) it->second.leases.insert(lease->lease_id);
  return true;
}

grpc::Status Coordinator::LeaseTask(grpc::ServerContext* ctx, const v1::LeaseTaskRequest* req,
                                    v1::LeaseTaskResponse* resp) {
  MXVAL_AUTHORIZE_WORKER(req->worker_id(), "LeaseTask");
  auto archs = LeaseArchs(req->worker_id(), req->device_index());
  if (!archs.ok()) {
    Denied(absl::StartsWith(archs.status().message(), "device_index") ? "unregistered_device" : "unregistered_worker",
           "LeaseTask", req->worker_id());
    return ToGrpc(archs.status());
  }
  if (archs->empty()) return grpc::Status::OK;  // draining
  const absl::Duration wait = std::min(FromProto(req->max_wait()), options_.max_long_poll);
  const absl::Time until = absl::Now() + wait;  // real time: this is I/O waiting, not scheduling logic
  while (true) {
    const uint64_t seen = scheduler_->version();
    {
      // A poll whose caller went away, or whose worker was drained while it
      // waited, takes nothing: the lease would reach nobody, or a worker told to stop.
      absl::MutexLock l(&mu_);
      auto it = workers_.find(req->worker_id());
      if (ctx->IsCancelled() || (it != workers_.end() && it->second.draining)) return grpc::Status::OK;
    }
    if (TryLease(req->worker_id(), *archs, req->device_index(), resp)) return grpc::Status::OK;
    const absl::Time now = absl::Now();
    if (now >= until || ctx->IsCancelled()) return grpc::Status::OK;
    // Wake when anything is queued; the cap re-checks time-based eligibility
    // (retry-elsewhere grace) and a cancelled poll.
    scheduler_->AwaitChange(seen, std::min(until - now, options_.poll_step));
  }
}

grpc::Status Coordinator::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                    v1::HeartbeatResponse* resp) {
  MXVAL_AUTHORIZE_WORKER(req->worker_id(), "Heartbeat");
  if (absl::Status st = CheckBounds(*req, ""); !st.ok()) return ToGrpc(st);
  if (absl::Status st = Registered(req->worker_id(), "Heartbeat"); !st.ok()) return ToGrpc(st);
  {
    absl::MutexLock l(&mu_);
    auto it = workers_.find(req->worker_id());  // gone since Registered(): the registry made room
    if (it == workers_.end()) return ToGrpc(absl::FailedPreconditionError("worker_id: not registered (register again)"));
    it->second.last_heartbeat = clock_->Now();
    resp->set_drain(it->second.draining);
  }
  const LeaseHolder who{req->worker_id(), ""};
  for (const std::string& lease : req->lease_ids()) {
    const absl::Status st = scheduler_->Renew(lease, &who);
    // Another worker's lease is not renewed, and its holder is not told.
    if (absl::IsPermissionDenied(st)) Denied("lease_not_held_by_caller", "Heartbeat", req->worker_id());
    if (absl::IsFailedPrecondition(st) || absl::IsPermissionDenied(st)) {
      resp->add_lost_lease_ids(lease);
      absl::MutexLock l(&mu_);
      if (auto it = workers_.find(req->worker_id()); it != workers_.end()) it->second.leases.erase(lease);
    } else if (!st.ok()) {
      return ToGrpc(st);  // store unavailable: the worker retries
    }
  }
  return grpc::Status::OK;
}

grpc::Status Coordinator::ReportResult(grpc::ServerContext* ctx, const v1::ReportResultRequest* req,
                                       v1::ReportResultResponse* resp) {
  MXVAL_AUTHORIZE_WORKER(req->worker_id(), "ReportResult");
  if (req->lease_id().empty()) return ToGrpc(absl::InvalidArgumentError("lease_id: empty"));
  if (req->lease_id().size() > 256) return ToGrpc(absl::InvalidArgumentError("lease_id: longer than 256 bytes"));
  // An unregistered caller is refused; a worker the coordinator forgot (a
  // restart) re-registers at its next heartbeat and retries the report.
  if (absl::Status st = Registered(req->worker_id(), "ReportResult"); !st.ok()) return ToGrpc(st);
  const v1::TaskResult& r = req->result();
  if (r.task_id().empty()) return ToGrpc(absl::InvalidArgumentError("result.task_id: empty"));
  const LeaseHolder who{req->worker_id(), r.task_id()};
  const bool infra = r.attempts_size() > 0 && r.attempts(r.attempts_size() - 1).failure() == v1::FAILURE_CLASS_INFRA;
  absl::Duration ran = -absl::Seconds(1);
  const bool pass = r.baseline().accuracy().verdict() == v1::VERDICT_PASS &&
                    r.candidate().accuracy().verdict() == v1::VERDICT_PASS;
  // A failing result is confirmed by one re-run on the same inputs
  // (preferably elsewhere) before it is final: triage tells flaky from real.
  // Not when every side that did not pass was declined by its kernel's
  // can_implement: that is a function of the arguments alone.
  const auto settled = [](const v1::KernelRun& k) { return k.accuracy().verdict() == v1::VERDICT_PASS || k.declined(); };
  const bool verify = !pass && !(settled(r.baseline()) && settled(r.candidate()));
  bool requeued = false;
  const absl::Status st =
      infra ? scheduler_->FailInfra(req->lease_id(), r.attempts(r.attempts_size() - 1).failure_detail(), &ran, &who)
            : scheduler_->Complete(req->lease_id(), r.SerializeAsString(), &ran, verify, &requeued, &who);
  if (absl::IsPermissionDenied(st) || absl::IsInvalidArgument(st)) {
    // A forged or misfiled result: nothing is recorded, the holder's attempt goes on.
    Denied(absl::IsPermissionDenied(st) ? "lease_not_held_by_caller" : "result_task_mismatch", "ReportResult",
           req->worker_id());
    return ToGrpc(st);
  }
  if (absl::IsFailedPrecondition(st)) {
    resp->set_accepted(false);  // the lease was lost: not recorded, and that is final
  } else if (!st.ok()) {
    return ToGrpc(st);  // e.g. UNAVAILABLE: the worker retries
  } else {
    resp->set_accepted(true);
  }
  if (options_.metrics) {
    const char* outcome = !resp->accepted() ? "lost" : infra ? "infra" : pass ? "pass" : "fail";
    options_.metrics->TaskReported(outcome, absl::ToDoubleSeconds(ran));
    if (requeued) options_.metrics->VerifyRerun();
    if (resp->accepted() && !requeued && !r.task_id().empty()) RecordTriage(r.task_id());
  }
  {
    absl::MutexLock l(&mu_);
    auto it = workers_.find(req->worker_id());
    if (it != workers_.end()) it->second.leases.erase(req->lease_id());
  }
  if (req->has_next()) {
    auto archs = LeaseArchs(req->worker_id(), req->next().device_index());
    if (archs.ok()) TryLease(req->worker_id(), *archs, req->next().device_index(), resp->mutable_next());
  }
  return grpc::Status::OK;
}

absl::Status Coordinator::CheckSubmitLimits(const std::string& client, absl::Duration* retry_after) {
  if (options_.max_inflight_jobs_per_client <= 0 && options_.submit_rate_per_minute <= 0) return absl::OkStatus();
  absl::MutexLock l(&quota_mu_);
  ClientQuota& q = quotas_[client];
  if (options_.max_inflight_jobs_per_client > 0) {
    std::vector<std::string> live;
    for (const std::string& id : q.jobs) {
      auto st = scheduler_->GetJob(id);
      if (st.ok() && (st->state == JobState::kQueued || st->state == JobState::kRunning)) live.push_back(id);
    }
    q.jobs.swap(live);
    if (static_cast<int>(q.jobs.size()) >= options_.max_inflight_jobs_per_client) {
      *retry_after = absl::Seconds(30);
      return absl::ResourceExhaustedError(absl::StrCat("client '", client, "' has ", q.jobs.size(),
                                                       " jobs queued or running (limit ",
                                                       options_.max_inflight_jobs_per_client,
                                                       "); retry when one finishes"));
    }
  }
  if (options_.submit_rate_per_minute > 0) {
    if (!q.submits) q.submits.emplace(options_.submit_rate_per_minute / 60.0, options_.submit_rate_per_minute / 6.0);
    if (!q.submits->TryTake(clock_->Now(), retry_after)) {
      return absl::ResourceExhaustedError(absl::StrCat("client '", client, "' is over ",
                                                       options_.submit_rate_per_minute, " submissions per minute; retry in ",
                                                       absl::FormatDuration(absl::Ceil(*retry_after, absl::Milliseconds(100)))));
    }
  }
  return absl::OkStatus();
}

namespace {
// A bounded label from a signature: "candidate FAIL_MISMATCH", "infra".
std::string SignatureKind(const std::string& sig) {
  if (sig.empty()) return "none";
  if (sig.rfind("infra", 0) == 0) return "infra";
  const size_t colon = sig.find(':');
  return colon == std::string::npos ? sig : sig.substr(0, colon);
}
}  // namespace

void Coordinator::RecordTriage(const std::string& task_id) {
  auto t = scheduler_->GetTask(task_id);
  if (!t.ok() || t->state != TaskState::kDone) return;
  // The common case on the report path: one clean attempt that passed is
  // PASS with no signature; classify (parse spec and results) only otherwise.
  if (t->attempts.size() == 1 && t->first_result.empty() && !TaskFailed(*t)) {
    options_.metrics->TriageDecision("PASS", "none");
    return;
  }
  auto job = scheduler_->GetJob(t->job_id);
  if (!job.ok()) return;
  v1::JobSpec spec;
  spec.ParseFromString(job->payload);
  const v1::TaskResult r = ResultOf(*t, spec);
  const std::string final_class = triage::TriageClassName(r.triage().triage_class());
  options_.metrics->TriageDecision(final_class, SignatureKind(r.triage().signature()));
  if (!t->first_result.empty()) {  // what the first run alone would have said
    TaskRecord alone = *t;
    alone.result = t->first_result;
    alone.first_result.clear();
    const std::string first_class = triage::TriageClassName(ResultOf(alone, spec).triage().triage_class());
    if (first_class != final_class) options_.metrics->TriageChanged(first_class, final_class);
  }
}

grpc::Status Coordinator::TriageLogs(grpc::ServerContext* ctx, const v1::TriageLogsRequest* req,
                                     v1::TriageLogsResponse* resp) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_SUBMITTER, "TriageLogs");
  triage::LogTriageOptions o = options_.log_triage;
  o.cancelled = [ctx] { return ctx->IsCancelled(); };
  auto r = triage::TriageLogs(*req, *rules_, *log_ownership_, o);
  if (!r.ok()) return ToGrpc(r.status());
  if (options_.metrics) {
    for (const v1::JobTriage& j : r->jobs()) {
      options_.metrics->TriageDecision(triage::TriageClassName(j.triage_class()), j.rule().empty() ? "none" : j.rule());
    }
  }
  *resp = std::move(*r);
  return grpc::Status::OK;
}

void Coordinator::RefreshMetrics() const {
  if (options_.metrics == nullptr) return;
  std::map<std::pair<std::string, std::string>, int> counts;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [id, w] : workers_) {
      const v1::WorkerStatus s = StatusOf(id, w);
      const std::string state = s.state() == v1::WORKER_STATE_LOST       ? "lost"
                                : s.state() == v1::WORKER_STATE_DRAINING ? "draining"
                                                                          : "active";
      for (const std::string& arch : w.archs) ++counts[{arch, state}];
      if (w.archs.empty()) ++counts[{"none", state}];
    }
  }
  options_.metrics->Refresh(scheduler_->Stats(), counts);
}

v1::WorkerStatus Coordinator::StatusOf(const std::string& id, const WorkerEntry& w) const {
  v1::WorkerStatus s;
  s.set_worker_id(id);
  *s.mutable_capabilities() = w.capabilities;
  const bool lost = clock_->Now() - w.last_heartbeat > options_.lease_duration;
  s.set_state(lost ? v1::WORKER_STATE_LOST : w.draining ? v1::WORKER_STATE_DRAINING : v1::WORKER_STATE_ACTIVE);
  ToProto(w.last_heartbeat, s.mutable_last_heartbeat());
  s.set_running_tasks(static_cast<int32_t>(w.leases.size()));
  return s;
}

grpc::Status Coordinator::ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest*,
                                      v1::ListWorkersResponse* resp) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_VIEWER, "ListWorkers");
  absl::MutexLock l(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, w] : workers_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (const std::string& id : ids) *resp->add_workers() = StatusOf(id, workers_.at(id));
  return grpc::Status::OK;
}

grpc::Status Coordinator::DrainWorker(grpc::ServerContext* ctx, const v1::DrainWorkerRequest* req,
                                      v1::DrainWorkerResponse* resp) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_ADMIN, "DrainWorker");
  absl::MutexLock l(&mu_);
  auto it = workers_.find(req->worker_id());
  if (it == workers_.end()) return ToGrpc(absl::NotFoundError(absl::StrCat("worker_id: no worker '", req->worker_id(), "'")));
  it->second.draining = !req->undrain();
  *resp->mutable_worker() = StatusOf(it->first, it->second);
  return grpc::Status::OK;
}

absl::StatusOr<v1::KernelLibraryRegistration> Coordinator::RegisterWithContent(v1::KernelLibraryRegistration r,
                                                                               const std::string& by,
                                                                               bool require_content) {
  r.clear_content_stored();  // set here, from what is stored (ignored on input)
  r.clear_content_bytes();
  if (absl::Status st = ValidateRegistration(r, "library"); !st.ok()) return st;
  auto blob = content_->Find(r.sha256());
  if (!blob.ok()) return blob.status();
  const int format = r.format() == v1::LIBRARY_FORMAT_PYTHON ? v1::LIBRARY_FORMAT_PYTHON : v1::LIBRARY_FORMAT_SHARED_OBJECT;
  if (blob->has_value() && (*blob)->format == format) {
    r.set_content_stored(true);
    r.set_content_bytes((*blob)->size);
  } else if (require_content) {
    return absl::NotFoundError(absl::StrCat("library.sha256: no content with digest ", r.sha256(),
                                            " is stored; upload it (UploadKernelLibrary)"));
  }
  return libraries_->Register(std::move(r), by, clock_->Now());
}

grpc::Status Coordinator::RegisterKernelLibrary(grpc::ServerContext* ctx, const v1::RegisterKernelLibraryRequest* req,
                                                v1::RegisterKernelLibraryResponse* resp) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_ADMIN, "RegisterKernelLibrary");
  auto r = RegisterWithContent(req->library(), caller->principal, req->require_content());
  if (!r.ok()) return ToGrpc(r.status());
  *resp->mutable_library() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status Coordinator::UploadKernelLibrary(grpc::ServerContext* ctx,
                                              grpc::ServerReader<v1::UploadKernelLibraryRequest>* reader,
                                              v1::RegisterKernelLibraryResponse* resp) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_ADMIN, "UploadKernelLibrary");
  v1::UploadKernelLibraryRequest msg;
  if (!reader->Read(&msg)) return ToGrpc(absl::InvalidArgumentError("library: the stream is empty"));
  if (!msg.has_library()) return ToGrpc(absl::InvalidArgumentError("library: missing in the first message"));
  v1::KernelLibraryRegistration reg = msg.library();
  reg.clear_content_stored();
  reg.clear_content_bytes();
  // Everything about the registration is checked before a byte is stored.
  if (absl::Status st = ValidateRegistration(reg, "library"); !st.ok()) return ToGrpc(st);
  auto upload = content_->Begin(reg.sha256(), reg.format(), msg.content_bytes());
  if (!upload.ok()) return ToGrpc(upload.status());
  for (bool first = true; first || reader->Read(&msg); first = false) {
    if (!first && (msg.has_library() || msg.content_bytes() != 0)) {
      return ToGrpc(absl::InvalidArgumentError("library: only the first message names the library"));
    }
    if (static_cast<int64_t>(msg.chunk().size()) > kBlobChunkBytes) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat("chunk: over ", kBlobChunkBytes, " bytes")));
    }
    if (absl::Status st = (*upload)->Add(msg.chunk()); !st.ok()) return ToGrpc(st);
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "upload cancelled by the client");
  }
  auto stored = (*upload)->Commit();
  if (!stored.ok()) return ToGrpc(stored.status());
  auto r = RegisterWithContent(std::move(reg), caller->principal, /*require_content=*/true);
  if (!r.ok()) return ToGrpc(r.status());
  *resp->mutable_library() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status Coordinator::FetchKernelLibrary(grpc::ServerContext* ctx, const v1::FetchKernelLibraryRequest* req,
                                             grpc::ServerWriter<v1::FetchKernelLibraryResponse>* writer) {
  MXVAL_AUTHORIZE_WORKER(req->worker_id(), "FetchKernelLibrary");
  if (absl::Status st = Registered(req->worker_id(), "FetchKernelLibrary"); !st.ok()) return ToGrpc(st);
  if (!IsSha256Hex(req->sha256())) {
    return ToGrpc(absl::InvalidArgumentError("sha256: not 64 lowercase hex digits"));
  }
  auto blob = content_->Find(req->sha256());
  if (!blob.ok()) return ToGrpc(blob.status());
  if (!blob->has_value()) {
    return ToGrpc(absl::NotFoundError(absl::StrCat("sha256: no kernel library content ", req->sha256(),
                                                   " is stored (registered without upload: only a --kernel-dir has it)")));
  }
  const BlobInfo info = **blob;
  for (int64_t i = 0; i < info.chunks; ++i) {
    auto chunk = content_->ReadChunk(info.sha256, i);
    if (!chunk.ok()) return ToGrpc(chunk.status());
    v1::FetchKernelLibraryResponse m;
    if (i == 0) {
      m.set_content_bytes(info.size);
      m.set_format(static_cast<v1::LibraryFormat>(info.format));
    }
    *m.mutable_chunk() = std::move(*chunk);
    if (!writer->Write(m)) return grpc::Status(grpc::StatusCode::CANCELLED, "the worker went away");
  }
  return grpc::Status::OK;
}

grpc::Status Coordinator::ListKernelLibraries(grpc::ServerContext* ctx, const v1::ListKernelLibrariesRequest*,
                                              v1::ListKernelLibrariesResponse* resp) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_VIEWER, "ListKernelLibraries");
  for (auto& [name, r] : libraries_->Snapshot()) *resp->add_libraries() = r;
  return grpc::Status::OK;
}

grpc::Status Coordinator::UnregisterKernelLibrary(grpc::ServerContext* ctx, const v1::UnregisterKernelLibraryRequest* req,
                                                  v1::UnregisterKernelLibraryResponse*) {
  MXVAL_AUTHORIZE(caller, v1::ROLE_ADMIN, "UnregisterKernelLibrary");
  return ToGrpc(libraries_->Unregister(req->name()));
}

std::unique_ptr<grpc::Server> StartServer(const std::string& address, Coordinator* coordinator, int* port,
                                          int max_message_bytes, std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder b;
  b.AddListeningPort(address, credentials ? credentials : grpc::InsecureServerCredentials(), port);
  b.SetMaxReceiveMessageSize(max_message_bytes);
  b.SetMaxSendMessageSize(max_message_bytes);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(auth::UndecodableRequestStatus());  // INVALID_ARGUMENT, not INTERNAL, for unparsable bytes
  b.experimental().SetInterceptorCreators(std::move(interceptors));
  b.RegisterService(static_cast<v1::ValidationService::Service*>(coordinator));
  b.RegisterService(static_cast<v1::WorkerService::Service*>(coordinator));
  b.RegisterService(static_cast<v1::AdminService::Service*>(coordinator));
  b.RegisterService(static_cast<v1::TriageService::Service*>(coordinator));
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  // grpc.health.v1 answers for "" and for each service by name (probes such
  // as grpc_health_probe -service=mxval.v1.ValidationService); Shutdown, or
  // SetServingStatus(false) at the start of a drain, makes all NOT_SERVING.
  if (server != nullptr && server->GetHealthCheckService() != nullptr) {
    for (const char* name : {v1::ValidationService::service_full_name(), v1::WorkerService::service_full_name(),
                             v1::AdminService::service_full_name(), v1::TriageService::service_full_name()}) {
      server->GetHealthCheckService()->SetServingStatus(name, true);
    }
  }
  return server;
}

}  // namespace coordinator
}  // namespace mxval
