#include "service/coordinator/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/digest.h"
#include "service/coordinator/store_codec.h"

namespace mxval {
namespace coordinator {

Scheduler::Scheduler(const Clock* clock, SchedulerOptions options, Store* store)
    : clock_(clock), options_(options), store_(store), shared_(store != nullptr && store->shared()) {}

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
  synced_rev_ = snap->rev;
  for (StoredJob& sj : snap->jobs) AddJobLocked(sj);
  for (TaskRecord& rec : snap->tasks) {
    auto jit = jobs_.find(rec.job_id);
    if (jit == jobs_.end()) continue;
    AddTaskLocked(std::move(rec), jit->second);
  }
  for (auto& [id, j] : jobs_) RefreshJobLocked(j);
  return absl::OkStatus();
}

void Scheduler::AddJobLocked(const StoredJob& sj) {
  Job& j = jobs_[sj.status.job_id];
  j.status = sj.status;
  j.status.tasks_total = j.status.tasks_done = j.status.tasks_running = j.status.tasks_failed = 0;
  j.reuse = sj.reuse;
  if (!j.status.request_id.empty()) request_ids_[j.status.request_id] = j.status.job_id;
  const bool final_state = j.status.state == JobState::kCancelled || j.status.state == JobState::kExpired;
  if (!final_state) {
    j.status.state = JobState::kQueued;  // re-derived from its tasks by RefreshJobLocked
    if (j.status.deadline) deadlines_.insert({*j.status.deadline, j.status.job_id});
  }
}

void Scheduler::AddTaskLocked(TaskRecord rec, Job& j) {
  const bool job_final = j.status.state == JobState::kCancelled || j.status.state == JobState::kExpired;
  TaskRecord& t = tasks_[rec.task_id] = std::move(rec);
  j.task_ids.push_back(t.task_id);
  if (!t.first_result.empty()) ++j.verify_reruns;
  ++j.status.tasks_total;
  if (job_final && (t.state == TaskState::kQueued || t.state == TaskState::kLeased)) t.state = TaskState::kCancelled;
  IndexTaskLocked(t, j);
}

void Scheduler::IndexTaskLocked(TaskRecord& t, Job& j) {
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

void Scheduler::UnindexTaskLocked(TaskRecord& t) {
  switch (t.state) {
    case TaskState::kQueued: {
      auto k = queued_at_.find(t.task_id);
      if (k != queued_at_.end()) {
        queues_[t.input.arch].erase(k->second);
        enqueued_at_.erase(k->second.seq);
        queued_at_.erase(k);
      }
      --unfinished_;
      break;
    }
    case TaskState::kLeased:
      ReleaseLeaseLocked(t);
      --unfinished_;
      break;
    case TaskState::kDone:
    case TaskState::kCancelled:
      break;  // final: a later row never changes them back
  }
}

absl::Status Scheduler::Sync() {
  absl::MutexLock l(&mu_);
  return SyncLocked();
}

absl::Status Scheduler::SyncLocked() {
  if (!shared_) return absl::OkStatus();
  auto c = store_->ChangesSince(synced_rev_);
  if (!c.ok()) return StoreResult(c.status());
  std::set<std::string> touched, added;
  for (const StoredJob& sj : c->jobs) {
    const std::string& id = sj.status.job_id;
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {  // submitted through another coordinator
      AddJobLocked(sj);
      added.insert(id);
      touched.insert(id);
      continue;
    }
    Job& j = it->second;
    if (sj.status.rev <= j.status.rev) continue;
    j.status.rev = sj.status.rev;
    const bool now_final = sj.status.state == JobState::kCancelled || sj.status.state == JobState::kExpired;
    const bool was_final = j.status.state == JobState::kCancelled || j.status.state == JobState::kExpired;
    if (now_final && !was_final) {  // cancelled or expired by another coordinator
      for (const std::string& tid : j.task_ids) {
        TaskRecord& t = tasks_[tid];
        if (t.state != TaskState::kQueued && t.state != TaskState::kLeased) continue;
        UnindexTaskLocked(t);
        t.state = TaskState::kCancelled;
      }
      j.status.state = sj.status.state;
      j.status.finished = sj.status.finished;
      if (j.status.deadline) deadlines_.erase({*j.status.deadline, id});
      ++version_;
    }
  }
  for (TaskRecord& row : c->tasks) {
    auto jit = jobs_.find(row.job_id);
    if (jit == jobs_.end()) continue;
    Job& j = jit->second;
    touched.insert(row.job_id);
    auto it = tasks_.find(row.task_id);
    if (it == tasks_.end()) {
      AddTaskLocked(std::move(row), j);
      continue;
    }
    TaskRecord& t = it->second;
    if (row.rev <= t.rev) continue;  // this coordinator's own write, or older
    UnindexTaskLocked(t);
    if (t.first_result.empty() && !row.first_result.empty()) ++j.verify_reruns;
    const bool job_final = j.status.state == JobState::kCancelled || j.status.state == JobState::kExpired;
    t = std::move(row);
    if (job_final && (t.state == TaskState::kQueued || t.state == TaskState::kLeased)) t.state = TaskState::kCancelled;
    IndexTaskLocked(t, j);
  }
  for (const std::string& id : added) {  // rows arrive in revision order, not task order
    std::vector<std::string>& ids = jobs_[id].task_ids;
    std::stable_sort(ids.begin(), ids.end(),
                     [](const std::string& a, const std::string& b) { return TaskSeq(a) < TaskSeq(b); });
  }
  for (const std::string& id : touched) RefreshJobLocked(jobs_[id]);
  synced_rev_ = std::max(synced_rev_, c->rev);
  return absl::OkStatus();
}

absl::Status Scheduler::StoreResult(absl::Status st) const {
  if (!st.ok() && st.code() != absl::StatusCode::kAborted && st.code() != absl::StatusCode::kAlreadyExists &&
      options_.on_store_error) {
    options_.on_store_error(st);
  }
  return st;
}

absl::Status Scheduler::PersistLocked(TaskRecord& t) {
  return store_ ? StoreResult(store_->UpdateTask(t, next_id_)) : absl::OkStatus();
}

absl::StatusOr<std::string> Scheduler::Submit(const JobInput& in) {
  absl::MutexLock l(&mu_);
  if (!in.request_id.empty()) {
    auto it = request_ids_.find(in.request_id);
    if (it != request_ids_.end()) return it->second;
  }
  if (in.tasks.empty()) return absl::InvalidArgumentError("job has no tasks");
  if (shared_) (void)SyncLocked();  // the queue limit and reusable results are fleet-wide
  if (unfinished_ + static_cast<int64_t>(in.tasks.size()) > options_.max_queued_tasks) {
    return absl::ResourceExhaustedError(absl::StrCat("queue full: ", unfinished_, " unfinished tasks, limit ",
                                                     options_.max_queued_tasks, ", this job adds ", in.tasks.size(),
                                                     "; retry later"));
  }
  // Build the job and its tasks aside, persist them, then apply.
  const absl::Time now = clock_->Now();
  Job j;
  if (shared_) {  // ids are unique across every coordinator on the store
    auto id = store_->AllocateId();
    if (!id.ok()) return StoreResult(id.status());
    j.status.job_id = absl::StrCat("job-", *id);
  } else {
    j.status.job_id = absl::StrCat("job-", next_id_++);
  }
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
    StoredJob stored{j.status, j.reuse};
    absl::Status st = StoreResult(store_->InsertJob(stored, recs, next_id_));
    if (st.code() == absl::StatusCode::kAlreadyExists) {  // the same request through another coordinator
      (void)SyncLocked();
      return std::string(st.message());
    }
    if (!st.ok()) return st;
    j.status.rev = stored.status.rev;
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
  if (shared_) return ClaimLocked(worker_id, archs, device);
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
  updated.lease_id = absl::StrCat("lease-", next_id_++, "-", RandomHex(kLeaseSecretBytes));
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

std::optional<Lease> Scheduler::ClaimLocked(const std::string& worker_id, const std::set<std::string>& archs,
                                            int device) {
  // The last sync saw nothing queued for these archs: nothing to claim (an
  // idle worker's poll costs no database round trip; syncs wake long polls).
  bool any = false;
  for (const std::string& a : archs) {
    auto q = queues_.find(a);
    any = any || (q != queues_.end() && !q->second.empty());
  }
  if (!any) return std::nullopt;
  ClaimRequest r{worker_id,     RandomHex(kLeaseSecretBytes), archs, device, clock_->Now(), options_.lease_duration,
                 options_.retry_elsewhere_grace};
  auto claimed = store_->ClaimTask(r);
  if (!claimed.ok()) {
    (void)StoreResult(claimed.status());
    return std::nullopt;
  }  // the worker polls again
  if (!claimed->has_value()) {  // other coordinators took them: catch up
    (void)SyncLocked();
    return std::nullopt;
  }
  TaskRecord row = std::move(**claimed);
  const std::string task_id = row.task_id, lease_id = row.lease_id;
  if (!tasks_.contains(task_id)) (void)SyncLocked();  // a job submitted elsewhere (brings this row too)
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return std::nullopt;  // cannot happen: the row is committed
  if (row.rev > it->second.rev) {
    Job& j = jobs_[row.job_id];
    UnindexTaskLocked(it->second);
    it->second = std::move(row);
    IndexTaskLocked(it->second, j);
    RefreshJobLocked(j);
  }
  const TaskRecord& t = it->second;
  if (t.state != TaskState::kLeased || t.lease_id != lease_id) return std::nullopt;
  return Lease{t.lease_id, task_id, t.job_id, t.input.payload, t.lease_expiry, static_cast<int>(t.attempts.size())};
}

absl::Status Scheduler::RetryShared(const std::function<absl::Status()>& op) {
  absl::Status st = op();
  // Another coordinator changed the row (ABORTED), or granted the lease and
  // this one has not synced it yet (FAILED_PRECONDITION): catch up, retry.
  for (int i = 0; shared_ && i < 3; ++i) {
    const bool retry = st.code() == absl::StatusCode::kAborted ||
                       (i == 0 && st.code() == absl::StatusCode::kFailedPrecondition);
    if (!retry || !SyncLocked().ok()) break;
    st = op();
  }
  if (st.code() == absl::StatusCode::kAborted) return absl::UnavailableError(st.message());  // caller retries
  return st;
}

TaskRecord* Scheduler::HeldLocked(const std::string& lease_id) {
  auto it = lease_to_task_.find(lease_id);
  if (it == lease_to_task_.end()) return nullptr;
  TaskRecord& t = tasks_[it->second];
  return (t.state == TaskState::kLeased && t.lease_id == lease_id) ? &t : nullptr;
}

absl::StatusOr<TaskRecord*> Scheduler::HeldByLocked(const std::string& lease_id, const LeaseHolder* who) {
  TaskRecord* t = HeldLocked(lease_id);
  if (t == nullptr) return absl::FailedPreconditionError(absl::StrCat("lease ", lease_id, " is not held"));
  if (who != nullptr && t->lease_worker != who->worker_id) {
    return absl::PermissionDeniedError(absl::StrCat("lease_id: lease ", lease_id, " is held by another worker"));
  }
  if (who != nullptr && !who->task_id.empty() && t->task_id != who->task_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("result.task_id: '", who->task_id, "' is not the task of lease ", lease_id, " ('", t->task_id, "')"));
  }
  return t;
}

absl::Status Scheduler::Renew(const std::string& lease_id, const LeaseHolder* who) {
  absl::MutexLock l(&mu_);
  TickLocked();
  return RetryShared([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return RenewLocked(lease_id, who); });
}

absl::Status Scheduler::RenewLocked(const std::string& lease_id, const LeaseHolder* who) {
  auto held = HeldByLocked(lease_id, who);
  if (!held.ok()) return held.status();
  TaskRecord* t = *held;
  TaskRecord updated = *t;
  updated.lease_expiry = clock_->Now() + options_.lease_duration;
  if (absl::Status st = PersistLocked(updated); !st.ok()) return st;
  expiries_.erase({t->lease_expiry, lease_id});
  t->lease_expiry = updated.lease_expiry;
  t->rev = updated.rev;
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
                                 bool verify, bool* requeued, const LeaseHolder* who) {
  absl::MutexLock l(&mu_);
  TickLocked();
  return RetryShared([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return CompleteLocked(lease_id, result, ran, verify, requeued, who);
  });
}

absl::Status Scheduler::CompleteLocked(const std::string& lease_id, const std::string& result, absl::Duration* ran,
                                       bool verify, bool* requeued, const LeaseHolder* who) {
  if (requeued) *requeued = false;
  auto held = HeldByLocked(lease_id, who);
  if (!held.ok()) {
    if (!absl::IsFailedPrecondition(held.status())) return held.status();
    return absl::FailedPreconditionError(absl::StrCat("lease ", lease_id, " is not held; result not recorded"));
  }
  TaskRecord* t = *held;
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

absl::Status Scheduler::FailInfra(const std::string& lease_id, const std::string& detail, absl::Duration* ran,
                                  const LeaseHolder* who) {
  absl::MutexLock l(&mu_);
  TickLocked();
  return RetryShared([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return FailInfraLocked(lease_id, detail, ran, who); });
}

absl::Status Scheduler::FailInfraLocked(const std::string& lease_id, const std::string& detail, absl::Duration* ran,
                                        const LeaseHolder* who) {
  auto held = HeldByLocked(lease_id, who);
  if (!held.ok()) return held.status();
  TaskRecord* t = *held;
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
    if (absl::Status st = StoreResult(store_->UpdateJob(final_status)); !st.ok()) return st;
  }
  j.status.rev = final_status.rev;
  for (const std::string& id : j.task_ids) {
    TaskRecord& t = tasks_[id];
    if (t.state == TaskState::kDone || t.state == TaskState::kCancelled) continue;
    UnindexTaskLocked(t);  // a leased task's worker learns at its next heartbeat
    t.state = TaskState::kCancelled;
    // Best effort: the job row already makes it final (a task another
    // coordinator finished meanwhile keeps its result; its row wins at sync).
    (void)PersistLocked(t);
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
  int resyncs = 0;
  while (!expiries_.empty() && expiries_.begin()->first < now) {
    const std::string lease_id = expiries_.begin()->second;
    TaskRecord* t = HeldLocked(lease_id);
    if (t == nullptr) {  // stale entry
      expiries_.erase(expiries_.begin());
      continue;
    }
    absl::Status st = FinishAttemptLocked(*t, "lease expired: worker lost or stalled");
    if (st.ok()) {
      ++lease_expiries_;
      continue;
    }
    // Renewed, completed or expired through another coordinator: catch up
    // (the row's new state replaces this expiry entry) and go on.
    if (shared_ && st.code() == absl::StatusCode::kAborted && ++resyncs <= 3 && SyncLocked().ok()) continue;
    break;  // store down: next tick
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
