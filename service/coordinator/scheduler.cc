#include "service/coordinator/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mxval {
namespace coordinator {

Scheduler::Scheduler(const Clock* clock, SchedulerOptions options) : clock_(clock), options_(options) {}

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
  const absl::Time now = clock_->Now();
  const std::string job_id = absl::StrCat("job-", next_id_++);
  Job& j = jobs_[job_id];
  j.status.job_id = job_id;
  j.status.request_id = in.request_id;
  j.status.priority = in.priority;
  j.status.created = now;
  if (in.deadline) {
    j.status.deadline = now + *in.deadline;
    deadlines_.insert({*j.status.deadline, job_id});
  }
  j.status.tasks_total = static_cast<int>(in.tasks.size());
  j.reuse = in.reuse_results;
  for (size_t i = 0; i < in.tasks.size(); ++i) {
    const std::string task_id = absl::StrCat(job_id, "-t", i);
    TaskRecord& t = tasks_[task_id];
    t.task_id = task_id;
    t.job_id = job_id;
    t.input = in.tasks[i];
    j.task_ids.push_back(task_id);
    auto cached = in.reuse_results ? results_by_key_.find(t.input.dedup_key) : results_by_key_.end();
    if (cached != results_by_key_.end()) {
      t.state = TaskState::kDone;
      t.has_result = true;
      t.reused = true;
      t.result = cached->second;
      ++j.status.tasks_done;
      continue;
    }
    ++unfinished_;
    EnqueueLocked(t);
  }
  if (!in.request_id.empty()) request_ids_[in.request_id] = job_id;
  RefreshJobLocked(j);
  return job_id;
}

void Scheduler::EnqueueLocked(TaskRecord& t) {
  const QueueKey key{jobs_[t.job_id].status.priority, next_seq_++};
  queues_[t.input.arch][key] = t.task_id;
  queued_at_[t.task_id] = key;
  t.state = TaskState::kQueued;
  t.lease_id.clear();
  t.lease_worker.clear();
}

std::optional<Lease> Scheduler::LeaseTask(const std::string& worker_id, const std::set<std::string>& archs) {
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
    for (auto it = q->second.begin(); it != q->second.end() && scanned < kScan; ++it, ++scanned) {
      const TaskRecord& t = tasks_[it->second];
      const bool preferred = std::none_of(t.attempts.begin(), t.attempts.end(),
                                          [&](const AttemptRecord& a) { return a.worker_id == worker_id; });
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
  queues_[best_arch].erase(key);
  queued_at_.erase(task_id);
  TaskRecord& t = tasks_[task_id];
  const absl::Time now = clock_->Now();
  t.state = TaskState::kLeased;
  t.lease_id = absl::StrCat("lease-", next_id_++);
  t.lease_worker = worker_id;
  t.lease_expiry = now + options_.lease_duration;
  t.attempts.push_back(AttemptRecord{worker_id, now, absl::InfinitePast(), false, ""});
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
  expiries_.erase({t->lease_expiry, lease_id});
  t->lease_expiry = clock_->Now() + options_.lease_duration;
  expiries_.insert({t->lease_expiry, lease_id});
  return absl::OkStatus();
}

void Scheduler::ReleaseLeaseLocked(TaskRecord& t) {
  expiries_.erase({t.lease_expiry, t.lease_id});
  lease_to_task_.erase(t.lease_id);
  --jobs_[t.job_id].status.tasks_running;
}

void Scheduler::MarkDoneLocked(TaskRecord& t) {
  t.state = TaskState::kDone;
  --unfinished_;
  Job& j = jobs_[t.job_id];
  ++j.status.tasks_done;
  if (t.has_result && !t.infra_failed) results_by_key_[t.input.dedup_key] = t.result;
  RefreshJobLocked(j);
}

absl::Status Scheduler::Complete(const std::string& lease_id, const std::string& result) {
  absl::MutexLock l(&mu_);
  TickLocked();
  TaskRecord* t = HeldLocked(lease_id);
  if (t == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("lease ", lease_id, " is not held; result not recorded"));
  }
  t->attempts.back().finished = clock_->Now();
  ReleaseLeaseLocked(*t);
  t->has_result = true;
  t->result = result;
  MarkDoneLocked(*t);
  return absl::OkStatus();
}

void Scheduler::FinishAttemptLocked(TaskRecord& t, const std::string& detail) {
  AttemptRecord& a = t.attempts.back();
  a.finished = clock_->Now();
  a.infra_failure = true;
  a.detail = detail;
  ReleaseLeaseLocked(t);
  if (static_cast<int>(t.attempts.size()) < options_.max_attempts) {
    EnqueueLocked(t);
    RefreshJobLocked(jobs_[t.job_id]);
  } else {
    t.infra_failed = true;
    MarkDoneLocked(t);
  }
}

absl::Status Scheduler::FailInfra(const std::string& lease_id, const std::string& detail) {
  absl::MutexLock l(&mu_);
  TickLocked();
  TaskRecord* t = HeldLocked(lease_id);
  if (t == nullptr) return absl::FailedPreconditionError(absl::StrCat("lease ", lease_id, " is not held"));
  FinishAttemptLocked(*t, detail);
  return absl::OkStatus();
}

void Scheduler::CancelTasksLocked(Job& j, JobState final_state) {
  for (const std::string& id : j.task_ids) {
    TaskRecord& t = tasks_[id];
    if (t.state == TaskState::kDone || t.state == TaskState::kCancelled) continue;
    if (t.state == TaskState::kQueued) {
      auto k = queued_at_.find(id);
      queues_[t.input.arch].erase(k->second);
      queued_at_.erase(k);
    } else {
      ReleaseLeaseLocked(t);  // the worker learns at its next heartbeat
    }
    t.state = TaskState::kCancelled;
    --unfinished_;
  }
  j.status.state = final_state;
  j.status.finished = clock_->Now();
  if (j.status.deadline) deadlines_.erase({*j.status.deadline, j.status.job_id});
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
  CancelTasksLocked(j, JobState::kCancelled);
  return absl::OkStatus();
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
    FinishAttemptLocked(*t, "lease expired: worker lost or stalled");
  }
  while (!deadlines_.empty() && deadlines_.begin()->first < now) {
    Job& j = jobs_[deadlines_.begin()->second];
    deadlines_.erase(deadlines_.begin());
    if (j.status.state == JobState::kQueued || j.status.state == JobState::kRunning) {
      CancelTasksLocked(j, JobState::kExpired);
    }
  }
}

void Scheduler::RefreshJobLocked(Job& j) {
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

absl::StatusOr<std::vector<TaskRecord>> Scheduler::GetTasks(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job_id: no job '", job_id, "'"));
  std::vector<TaskRecord> out;
  out.reserve(it->second.task_ids.size());
  for (const std::string& id : it->second.task_ids) out.push_back(tasks_.at(id));
  return out;
}

int64_t Scheduler::QueuedTasks() const {
  absl::MutexLock l(&mu_);
  return unfinished_;
}

}  // namespace coordinator
}  // namespace mxval
