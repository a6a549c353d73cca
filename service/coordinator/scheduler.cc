#include "service/coordinator/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mxval {
namespace coordinator {

Scheduler::Scheduler(const Clock* clock, SchedulerOptions options, Store* store)
    : clock_(clock), options_(options), store_(store) {}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const Clock* clock, SchedulerOptions options,
                                                             Store* store) {
  auto s = std::make_unique<Scheduler>(clock, options, store);
  absl::MutexLock l(&s->mu_);
  if (absl::Status st = s->RecoverLocked(); !st.ok()) return st;
  return s;
}

absl::Status Scheduler::RecoverLocked() {
  if (store_ == nullptr) return absl::OkStatus();
  auto snap = store_->Load();
  if (!snap.ok()) return snap.status();
  next_id_ = std::max<uint64_t>(next_id_, snap->next_id);
  for (StoredJob& sj : snap->jobs) {
    Job& j = jobs_[sj.status.job_id];
    j.status = sj.status;
    j.status.tasks_total = j.status.tasks_done = j.status.tasks_running = j.status.tasks_failed = 0;
    j.reuse = sj.reuse;
    if (!j.status.request_id.empty()) request_ids_[j.status.request_id] = j.status.job_id;
  }
  for (TaskRecord& rec : snap->tasks) {
    auto jit = jobs_.find(rec.job_id);
    if (jit == jobs_.end()) continue;
    Job& j = jit->second;
    const bool job_final = j.status.state == JobState::kCancelled || j.status.state == JobState::kExpired;
    TaskRecord& t = tasks_[rec.task_id] = std::move(rec);
    j.task_ids.push_back(t.task_id);
    if (!t.first_result.empty()) ++j.verify_reruns;
    ++j.status.tasks_total;
    if (job_final && (t.state == TaskState::kQueued || t.state == TaskState::kLeased)) t.state = TaskState::kCancelled;
    switch (t.state) {
      case TaskState::kDone:
        ++j.status.tasks_done;
        CountDoneLocked(j, t);
        if (t.has_result && !t.infra_failed) results_by_key_[t.input.dedup_key] = t.result;
        break;
      case TaskState::kQueued:
        ++unfinished_;
        EnqueueLocked(t);
        break;
      case TaskState::kLeased:
        ++unfinished_;
        ++j.status.tasks_running;
        lease_to_task_[t.lease_id] = t.task_id;
        expiries_.insert({t.lease_expiry, t.lease_id});
        break;
      case TaskState::kCancelled:
        break;
    }
  }
  for (auto& [id, j] : jobs_) {
    const bool final_state = j.status.state == JobState::kCancelled || j.status.state == JobState::kExpired;
    if (!final_state) {
      j.status.state = JobState::kQueued;  // re-derived below
      if (j.status.deadline) deadlines_.insert({*j.status.deadline, id});
    }
    RefreshJobLocked(j);
  }
  return absl::OkStatus();
}

absl::Status Scheduler::PersistLocked(const TaskRecord& t) {
  return store_ ? store_->UpdateTask(t, next_id_) : absl::OkStatus();
}

absl::StatusOr<std::string> Scheduler::Submit(const JobInput& in) {
  absl::MutexLock l(&mu_);
  if (!in.request_id.empty()) {
    auto it = request_ids_.find(in.request_id);
    if (it != request_ids_.end()) return it->second;
  }
  if (in.tasks.empty()) return absl::InvalidArgumentError("job has no tasks");
  if (unfinished_ + static_cast<int64_t>(in.tasks.size()) > options_.max_queued_tasks) {
    return absl::ResourceExhaustedError(absl::StrCat("queue full: ", unfinished_, " unfinished tasks, limit ",
                                                     options_.max_queued_tasks, ", this job adds ", in.tasks.size(),
                                                     "; retry later"));
  }
  // Build the job and its tasks aside, persist them, then apply.
  const absl::Time now = clock_->Now();
  Job j;
  j.status.job_id = absl::StrCat("job-", next_id_++);
  j.status.request_id = in.request_id;
  j.status.priority = in.priority;
  j.status.created = now;
  if (in.deadline) j.status.deadline = now + *in.deadline;
  j.status.tasks_total = static_cast<int>(in.tasks.size());
  j.status.payload = in.payload;
  j.reuse = in.reuse_results;
  std::vector<TaskRecord> recs(in.tasks.size());
  for (size_t i = 0; i < in.tasks.size(); ++i) {
    TaskRecord& t = recs[i];
    t.task_id = absl::StrCat(j.status.job_id, "-t", i);
    t.job_id = j.status.job_id;
    t.input = in.tasks[i];
    auto cached = in.reuse_results ? results_by_key_.find(t.input.dedup_key) : results_by_key_.end();
    if (cached != results_by_key_.end()) {
      t.state = TaskState::kDone;
      t.has_result = t.reused = true;
      t.result = cached->second;
    }
  }
  if (store_) {
    if (absl::Status st = store_->InsertJob(StoredJob{j.status, j.reuse}, recs, next_id_); !st.ok()) return st;
  }
  const std::string job_id = j.status.job_id;
  Job& job = jobs_[job_id] = std::move(j);
  if (job.status.deadline) deadlines_.insert({*job.status.deadline, job_id});
  for (TaskRecord& rec : recs) {
    job.task_ids.push_back(rec.task_id);
    TaskRecord& t = tasks_[rec.task_id] = std::move(rec);
    if (t.state == TaskState::kDone) {
      ++job.status.tasks_done;
      CountDoneLocked(job, t);
    } else {
      ++unfinished_;
      EnqueueLocked(t);
    }
  }
  if (!in.request_id.empty()) request_ids_[in.request_id] = job_id;
  RefreshJobLocked(job);
  return job_id;
}

void Scheduler::EnqueueLocked(TaskRecord& t) {
  ++version_;
  const QueueKey key{jobs_[t.job_id].status.priority, next_seq_++};
  queues_[t.input.arch][key] = t.task_id;
  queued_at_[t.task_id] = key;
  enqueued_at_[key.seq] = clock_->Now();
  t.state = TaskState::kQueued;
  t.lease_id.clear();
  t.lease_worker.clear();
}

std::optional<Lease> Scheduler::LeaseTask(const std::string& worker_id, const std::set<std::string>& archs,
                                          int device) {
  absl::MutexLock l(&mu_);
  TickLocked();
  // Best queued task across the worker's archs; within the first few of each
  // queue prefer one that has not already failed on this worker.
  constexpr int kScan = 32;
  const std::pair<const QueueKey, std::string>* best = nullptr;
  bool best_preferred = false;
  std::string best_arch;
  for (const std::string& arch : archs) {
    auto q = queues_.find(arch);
    if (q == queues_.end()) continue;
    int scanned = 0;
    const absl::Time now = clock_->Now();
    for (auto it = q->second.begin(); it != q->second.end() && scanned < kScan; ++it, ++scanned) {
      const TaskRecord& t = tasks_[it->second];
      const bool preferred = std::none_of(t.attempts.begin(), t.attempts.end(),
                                          [&](const AttemptRecord& a) { return a.worker_id == worker_id; });
      if (!preferred && now - t.attempts.back().finished < options_.retry_elsewhere_grace) continue;
      const bool better = best == nullptr || (preferred && !best_preferred) ||
                          (preferred == best_preferred && it->first < best->first);
      if (better) {
        best = &*it;
        best_preferred = preferred;
        best_arch = arch;
      }
      if (preferred) break;  // later entries of this queue are lower in order
    }
  }
  if (best == nullptr) return std::nullopt;
  const std::string task_id = best->second;
  const QueueKey key = best->first;  // copy: erase() frees the node `best` points into
  TaskRecord& t = tasks_[task_id];
  const absl::Time now = clock_->Now();
  TaskRecord updated = t;
  updated.state = TaskState::kLeased;
  updated.lease_id = absl::StrCat("lease-", next_id_++);
  updated.lease_worker = worker_id;
  updated.lease_expiry = now + options_.lease_duration;
  updated.attempts.push_back(AttemptRecord{worker_id, now, absl::InfinitePast(), false, "", device});
  if (!PersistLocked(updated).ok()) return std::nullopt;  // the worker polls again
  queues_[best_arch].erase(key);
  queued_at_.erase(task_id);
  enqueued_at_.erase(key.seq);
  t = std::move(updated);
  lease_to_task_[t.lease_id] = task_id;
  expiries_.insert({t.lease_expiry, t.lease_id});
  Job& j = jobs_[t.job_id];
  ++j.status.tasks_running;
  RefreshJobLocked(j);
  return Lease{t.lease_id, task_id, t.job_id, t.input.payload, t.lease_expiry, static_cast<int>(t.attempts.size())};
}

TaskRecord* Scheduler::HeldLocked(const std::string& lease_id) {
  auto it = lease_to_task_.find(lease_id);
  if (it == lease_to_task_.end()) return nullptr;
  TaskRecord& t = tasks_[it->second];
  return (t.state == TaskState::kLeased && t.lease_id == lease_id) ? &t : nullptr;
}

absl::Status Scheduler::Renew(const std::string& lease_id) {
  absl::MutexLock l(&mu_);
  TickLocked();
  TaskRecord* t = HeldLocked(lease_id);
  if (t == nullptr) return absl::FailedPreconditionError(absl::StrCat("lease ", lease_id, " is not held"));
  TaskRecord updated = *t;
  updated.lease_expiry = clock_->Now() + options_.lease_duration;
  if (absl::Status st = PersistLocked(updated); !st.ok()) return st;
  expiries_.erase({t->lease_expiry, lease_id});
  t->lease_expiry = updated.lease_expiry;
  expiries_.insert({t->lease_expiry, lease_id});
  return absl::OkStatus();
}

void Scheduler::ReleaseLeaseLocked(TaskRecord& t) {
  expiries_.erase({t.lease_expiry, t.lease_id});
  lease_to_task_.erase(t.lease_id);
  --jobs_[t.job_id].status.tasks_running;
}

void Scheduler::CountDoneLocked(Job& j, const TaskRecord& t) {
  j.done_order.push_back(t.task_id);
  const bool failed = options_.is_failed ? options_.is_failed(t) : t.infra_failed;
  j.status.tasks_failed += failed;
}

void Scheduler::MarkDoneLocked(TaskRecord& t) {
  t.state = TaskState::kDone;
  --unfinished_;
  Job& j = jobs_[t.job_id];
  ++j.status.tasks_done;
  CountDoneLocked(j, t);
  if (t.has_result && !t.infra_failed) results_by_key_[t.input.dedup_key] = t.result;
  RefreshJobLocked(j);
}

absl::Status Scheduler::Complete(const std::string& lease_id, const std::string& result, absl::Duration* ran,
                                 bool verify, bool* requeued) {
  absl::MutexLock l(&mu_);
  TickLocked();
  if (requeued) *requeued = false;
  TaskRecord* t = HeldLocked(lease_id);
  if (t == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("lease ", lease_id, " is not held; result not recorded"));
  }
  Job& job = jobs_[t->job_id];
  const int budget = std::max(options_.verify_min_per_job,
                              job.status.tasks_total / std::max(1, options_.verify_fraction_div));
  const bool rerun = verify && t->first_result.empty() && job.verify_reruns < budget;
  TaskRecord updated = *t;
  updated.attempts.back().finished = clock_->Now();
  if (rerun) {
    updated.first_result = result;
    updated.attempts.back().detail = "failed; re-running on the same inputs to verify";
    updated.state = TaskState::kQueued;
    updated.lease_id.clear();
    updated.lease_worker.clear();
  } else {
    updated.has_result = true;
    updated.result = result;
    updated.state = TaskState::kDone;
  }
  if (absl::Status st = PersistLocked(updated); !st.ok()) return st;  // the worker retries the report
  if (ran) *ran = updated.attempts.back().finished - updated.attempts.back().started;
  ReleaseLeaseLocked(*t);
  *t = std::move(updated);
  if (rerun) {
    ++job.verify_reruns;
    ++verify_reruns_;
    EnqueueLocked(*t);
    RefreshJobLocked(job);
    if (requeued) *requeued = true;
  } else {
    MarkDoneLocked(*t);
  }
  return absl::OkStatus();
}

absl::StatusOr<TaskRecord> Scheduler::GetTask(const std::string& task_id) const {
  absl::MutexLock l(&mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return absl::NotFoundError(absl::StrCat("task_id: no task '", task_id, "'"));
  return it->second;
}

absl::Status Scheduler::FinishAttemptLocked(TaskRecord& t, const std::string& detail) {
  TaskRecord updated = t;
  AttemptRecord& a = updated.attempts.back();
  a.finished = clock_->Now();
  a.infra_failure = true;
  a.detail = detail;
  const int infra_attempts = static_cast<int>(std::count_if(
      updated.attempts.begin(), updated.attempts.end(), [](const AttemptRecord& r) { return r.infra_failure; }));
  const bool retry = infra_attempts < options_.max_attempts;
  if (retry) {
    updated.state = TaskState::kQueued;
    updated.lease_id.clear();
    updated.lease_worker.clear();
  } else {
    updated.state = TaskState::kDone;
    updated.infra_failed = true;
  }
  if (absl::Status st = PersistLocked(updated); !st.ok()) return st;
  ReleaseLeaseLocked(t);
  t = std::move(updated);
  if (retry) {
    ++retries_;
    EnqueueLocked(t);
    RefreshJobLocked(jobs_[t.job_id]);
  } else {
    MarkDoneLocked(t);
  }
  return absl::OkStatus();
}

absl::Status Scheduler::FailInfra(const std::string& lease_id, const std::string& detail, absl::Duration* ran) {
  absl::MutexLock l(&mu_);
  TickLocked();
  TaskRecord* t = HeldLocked(lease_id);
  if (t == nullptr) return absl::FailedPreconditionError(absl::StrCat("lease ", lease_id, " is not held"));
  const absl::Time started = t->attempts.back().started;
  absl::Status st = FinishAttemptLocked(*t, detail);
  if (st.ok() && ran) *ran = clock_->Now() - started;
  return st;
}

absl::Status Scheduler::CancelTasksLocked(Job& j, JobState final_state) {
  // The job's final state first: on recovery, its unfinished tasks then count
  // as cancelled even if the crash came before every task row was written.
  JobStatus final_status = j.status;
  final_status.state = final_state;
  final_status.finished = clock_->Now();
  if (store_) {
    if (absl::Status st = store_->UpdateJob(final_status); !st.ok()) return st;
  }
  for (const std::string& id : j.task_ids) {
    TaskRecord& t = tasks_[id];
    if (t.state == TaskState::kDone || t.state == TaskState::kCancelled) continue;
    if (t.state == TaskState::kQueued) {
      auto k = queued_at_.find(id);
      queues_[t.input.arch].erase(k->second);
      enqueued_at_.erase(k->second.seq);
      queued_at_.erase(k);
    } else {
      ReleaseLeaseLocked(t);  // the worker learns at its next heartbeat
    }
    t.state = TaskState::kCancelled;
    (void)PersistLocked(t);  // best effort: the job row already makes it final
    --unfinished_;
  }
  j.status.state = final_state;
  j.status.finished = final_status.finished;
  ++version_;
  if (j.status.deadline) deadlines_.erase({*j.status.deadline, j.status.job_id});
  return absl::OkStatus();
}

absl::Status Scheduler::Cancel(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job_id: no job '", job_id, "'"));
  Job& j = it->second;
  if (j.status.state == JobState::kDone || j.status.state == JobState::kCancelled ||
      j.status.state == JobState::kExpired) {
    return absl::OkStatus();  // already final
  }
  return CancelTasksLocked(j, JobState::kCancelled);
}

void Scheduler::Tick() {
  absl::MutexLock l(&mu_);
  TickLocked();
}

void Scheduler::TickLocked() {
  const absl::Time now = clock_->Now();
  while (!expiries_.empty() && expiries_.begin()->first < now) {
    const std::string lease_id = expiries_.begin()->second;
    TaskRecord* t = HeldLocked(lease_id);
    if (t == nullptr) {  // stale entry
      expiries_.erase(expiries_.begin());
      continue;
    }
    if (!FinishAttemptLocked(*t, "lease expired: worker lost or stalled").ok()) break;  // store down: next tick
    ++lease_expiries_;
  }
  while (!deadlines_.empty() && deadlines_.begin()->first < now) {
    Job& j = jobs_[deadlines_.begin()->second];
    if (j.status.state != JobState::kQueued && j.status.state != JobState::kRunning) {
      deadlines_.erase(deadlines_.begin());
      continue;
    }
    if (!CancelTasksLocked(j, JobState::kExpired).ok()) break;  // store down: next tick
  }
}

void Scheduler::RefreshJobLocked(Job& j) {
  ++version_;  // every transition that matters to a watcher passes here
  JobStatus& s = j.status;
  if (s.state == JobState::kCancelled || s.state == JobState::kExpired || s.state == JobState::kDone) return;
  if (s.tasks_done == s.tasks_total) {
    s.state = JobState::kDone;
    s.finished = clock_->Now();
    if (s.deadline) deadlines_.erase({*s.deadline, s.job_id});
  } else if (s.tasks_running > 0 || s.tasks_done > 0) {
    s.state = JobState::kRunning;
  } else {
    s.state = JobState::kQueued;
  }
}

absl::StatusOr<JobStatus> Scheduler::GetJob(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job_id: no job '", job_id, "'"));
  return it->second.status;
}

absl::StatusOr<JobDelta> Scheduler::DoneSince(const std::string& job_id, size_t cursor) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job_id: no job '", job_id, "'"));
  const Job& j = it->second;
  JobDelta d;
  d.status = j.status;
  for (size_t i = std::min(cursor, j.done_order.size()); i < j.done_order.size(); ++i) {
    d.done.push_back(tasks_.at(j.done_order[i]));
  }
  d.cursor = j.done_order.size();
  return d;
}

std::optional<std::string> Scheduler::FindRequest(const std::string& request_id) const {
  absl::MutexLock l(&mu_);
  auto it = request_ids_.find(request_id);
  if (request_id.empty() || it == request_ids_.end()) return std::nullopt;
  return it->second;
}

uint64_t Scheduler::version() const {
  absl::MutexLock l(&mu_);
  return version_;
}

namespace {
struct ChangeWait {
  const uint64_t* version;
  uint64_t seen;
};
bool Changed(ChangeWait* w) { return *w->version != w->seen; }
}  // namespace

uint64_t Scheduler::AwaitChange(uint64_t seen, absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  ChangeWait w{&version_, seen};
  mu_.AwaitWithTimeout(absl::Condition(&Changed, &w), timeout);
  return version_;
}

absl::StatusOr<std::vector<TaskRecord>> Scheduler::GetTasks(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job_id: no job '", job_id, "'"));
  std::vector<TaskRecord> out;
  out.reserve(it->second.task_ids.size());
  for (const std::string& id : it->second.task_ids) out.push_back(tasks_.at(id));
  return out;
}

SchedulerStats Scheduler::Stats() const {
  absl::MutexLock l(&mu_);
  SchedulerStats s;
  s.tasks_queued = static_cast<int64_t>(queued_at_.size());
  s.tasks_leased = static_cast<int64_t>(lease_to_task_.size());
  for (const auto& [id, j] : jobs_) {
    switch (j.status.state) {
      case JobState::kQueued: ++s.jobs_queued; break;
      case JobState::kRunning: ++s.jobs_running; break;
      case JobState::kDone: ++s.jobs_done; break;
      case JobState::kCancelled: ++s.jobs_cancelled; break;
      case JobState::kExpired: ++s.jobs_expired; break;
    }
  }
  s.oldest_queued_age = enqueued_at_.empty() ? absl::ZeroDuration() : clock_->Now() - enqueued_at_.begin()->second;
  s.lease_expiries_total = lease_expiries_;
  s.retries_total = retries_;
  s.verify_reruns_total = verify_reruns_;
  return s;
}

std::vector<JobStatus> Scheduler::ListJobs() const {
  absl::MutexLock l(&mu_);
  std::vector<JobStatus> out;
  out.reserve(jobs_.size());
  for (const auto& [id, j] : jobs_) out.push_back(j.status);
  std::sort(out.begin(), out.end(), [](const JobStatus& a, const JobStatus& b) {
    return a.created != b.created ? a.created > b.created : a.job_id > b.job_id;
  });
  return out;
}

int64_t Scheduler::QueuedTasks() const {
  absl::MutexLock l(&mu_);
  return unfinished_;
}

}  // namespace coordinator
}  // namespace mxval
