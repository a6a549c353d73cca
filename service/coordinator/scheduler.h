// The coordinator's scheduling logic: pure state, no gRPC and no storage.
// (The gRPC handlers map protos onto it; a store persists its transitions.)
//
// Task lifecycle: QUEUED -> LEASED -> DONE, or back to QUEUED when a lease
// expires or the worker reports an infrastructure failure, until
// max_attempts; then DONE with an infrastructure-failure result. CANCELLED
// when its job is cancelled or expires. Every attempt is recorded with its
// worker. A result is accepted only from the current lease holder, so it is
// recorded exactly once even if a presumed-dead worker reports late.
//
// Durability: with a Store, every transition is written before it is applied
// in memory (a failed write leaves memory unchanged and returns UNAVAILABLE),
// so a restart from the same store loses no accepted job, lease or result.
//
// Several coordinators (shared store): the database is the arbiter. Leases
// are claimed by the store (PostgreSQL: SELECT ... FOR UPDATE SKIP LOCKED),
// ids come from it, every task write is compare-and-set on the row's
// revision, and Sync() applies what the others wrote; in-memory state is a
// cache of the database that each coordinator keeps current.
//
// Thread-safe: one mutex guards all state.
#ifndef MXVAL_SERVICE_COORDINATOR_SCHEDULER_H_
#define MXVAL_SERVICE_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "service/coordinator/scheduler_types.h"
#include "service/coordinator/store.h"

namespace mxval {
namespace coordinator {

struct SchedulerOptions {
  absl::Duration lease_duration = absl::Seconds(30);
  int max_attempts = 3;                 // per task, including the first
  int64_t max_queued_tasks = 1'000'000; // RESOURCE_EXHAUSTED beyond (tasks not yet DONE)
  // A worker that just failed a task is not offered it again for this long,
  // so another worker gets the first chance to retry it.
  absl::Duration retry_elsewhere_grace = absl::Seconds(5);
  // Whether a DONE task counts as failed (the scheduler does not read
  // results; the coordinator parses them). Unset: infrastructure failures only.
  std::function<bool(const TaskRecord&)> is_failed;
  // Verification re-runs of failing tasks (triage): at most this many per
  // job beyond max(0, ...) — max(verify_min, tasks / verify_fraction_div).
  int verify_min_per_job = 16;
  int verify_fraction_div = 4;
  // Called with every error a store read or write returns (a full disk, a
  // lost database connection), before the caller sees it as UNAVAILABLE:
  // `mxval serve` logs and counts them. Called with the scheduler's lock
  // held: must not call back into the scheduler.
  std::function<void(const absl::Status&)> on_store_error;
};

// Options with the three that tests and tools most often set.
inline SchedulerOptions MakeSchedulerOptions(absl::Duration lease, int max_attempts, int64_t max_queued) {
  SchedulerOptions o;
  o.lease_duration = lease;
  o.max_attempts = max_attempts;
  o.max_queued_tasks = max_queued;
  return o;
}

// What changed in a job since a cursor: its status and the tasks that became
// DONE since then, in completion order.
struct JobDelta {
  JobStatus status;
  std::vector<TaskRecord> done;
  size_t cursor = 0;  // pass back to get only later completions
};

struct Lease {
  std::string lease_id, task_id, job_id;
  std::string payload;
  absl::Time expiry;
  int attempt = 0;  // 1-based
};

// Who a worker call says holds a lease: checked against the lease's grant
// (its worker, and the task it was granted for) so that only the holder can
// renew it or report its result, and only for the leased task.
struct LeaseHolder {
  std::string worker_id;
  std::string task_id;  // empty: not checked (heartbeats name no task)
};

struct SchedulerStats {
  int64_t tasks_queued = 0, tasks_leased = 0;
  int64_t jobs_queued = 0, jobs_running = 0, jobs_done = 0, jobs_cancelled = 0, jobs_expired = 0;
  absl::Duration oldest_queued_age;  // zero when nothing is queued
  int64_t lease_expiries_total = 0;  // leases that expired (worker lost or stalled)
  int64_t retries_total = 0;         // attempts re-queued after an infrastructure failure
  int64_t verify_reruns_total = 0;   // failing tasks re-run to verify them
};

class Scheduler {
 public:
  // Without a store: in-memory only (tests, benchmarks).
  Scheduler(const Clock* clock, SchedulerOptions options, Store* store = nullptr);

  // With a store: rebuilds jobs, queues, leases and results from it first.
  // UNAVAILABLE if the store cannot be read.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const Clock* clock, SchedulerOptions options, Store* store);

  // Accepts a job and returns its id. The same non-empty request_id returns
  // the first job's id again without adding tasks. INVALID_ARGUMENT for a job
  // without tasks; RESOURCE_EXHAUSTED if the queue would exceed its limit.
  absl::StatusOr<std::string> Submit(const JobInput& job);

  // The highest-priority queued task (FIFO within a priority) for one of
  // `archs`, preferring tasks that have not failed on this worker; a task that
  // failed on this worker within retry_elsewhere_grace is not offered to it at
  // all. nullopt if none. Expired leases and deadlines are processed first.
  std::optional<Lease> LeaseTask(const std::string& worker_id, const std::set<std::string>& archs, int device = 0);

  // Extends a lease. UNAVAILABLE if the store write fails. FAILED_PRECONDITION if it is no longer held (expired,
  // re-leased elsewhere, cancelled, done). With `who` (worker calls; null:
  // trusted in-process callers): PERMISSION_DENIED when the lease was granted
  // to another worker, INVALID_ARGUMENT when it was granted for another task.
  absl::Status Renew(const std::string& lease_id, const LeaseHolder* who = nullptr);

  // Records the result of a held lease, exactly once. FAILED_PRECONDITION if
  // the lease is not held (a late report from a worker presumed dead).
  // *ran (optional) receives the attempt's duration (lease to report).
  // With `verify` (the result is a failure triage wants confirmed): the first
  // time, the result is kept as the task's first_result and the task is
  // re-queued for one re-run on the same inputs, preferably on another worker
  // (bounded per job); *requeued (optional) says whether that happened.
  // `who` as for Renew.
  absl::Status Complete(const std::string& lease_id, const std::string& result, absl::Duration* ran = nullptr,
                        bool verify = false, bool* requeued = nullptr, const LeaseHolder* who = nullptr);
  // One task. NOT_FOUND for an unknown id.
  absl::StatusOr<TaskRecord> GetTask(const std::string& task_id) const;

  // The worker could not run the task (crash, signal, timeout, OOM): records
  // an infrastructure attempt and re-queues, or finishes the task as an
  // infrastructure failure after max_attempts. FAILED_PRECONDITION if not held.
  // `who` as for Renew.
  absl::Status FailInfra(const std::string& lease_id, const std::string& detail, absl::Duration* ran = nullptr,
                         const LeaseHolder* who = nullptr);

  // Cancels a job's unfinished tasks. NOT_FOUND for an unknown job.
  absl::Status Cancel(const std::string& job_id);

  // Re-queues tasks whose leases expired; expires jobs past their deadline.
  void Tick();

  // With a shared store: applies the jobs and tasks other coordinators wrote
  // since the last sync (new jobs, leases, results, cancels) and wakes
  // watchers. Call it periodically (`mxval serve` does, every 100 ms); every
  // lease, report and submit also catches up when it meets a change made
  // elsewhere. A no-op without a shared store. UNAVAILABLE if the store
  // cannot be read.
  absl::Status Sync();

  absl::StatusOr<JobStatus> GetJob(const std::string& job_id) const;
  // The job a request id was accepted as, if any (idempotent retries).
  std::optional<std::string> FindRequest(const std::string& request_id) const;
  // O(new completions), for watchers. NOT_FOUND for an unknown job.
  absl::StatusOr<JobDelta> DoneSince(const std::string& job_id, size_t cursor) const;
  // A counter bumped by every state change (submit, lease, result, expiry,
  // cancel). AwaitChange blocks until it differs from `seen` or `timeout`
  // passes, and returns its value: long polls and watches wake on change
  // instead of sleeping in steps.
  uint64_t version() const;
  uint64_t AwaitChange(uint64_t seen, absl::Duration timeout) const;
  absl::StatusOr<std::vector<TaskRecord>> GetTasks(const std::string& job_id) const;
  SchedulerStats Stats() const;
  // Every job, newest first.
  std::vector<JobStatus> ListJobs() const;
  int64_t QueuedTasks() const;

 private:
  struct QueueKey {
    int priority;
    uint64_t seq;
    bool operator<(const QueueKey& o) const { return priority != o.priority ? priority > o.priority : seq < o.seq; }
  };
  struct Job {
    JobStatus status;
    std::vector<std::string> task_ids;
    std::vector<std::string> done_order;  // task ids in completion order
    bool reuse = false;
    int verify_reruns = 0;
  };
  absl::Status RecoverLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stored job / task row joins the in-memory state (recovery and sync).
  void AddJobLocked(const StoredJob& sj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddTaskLocked(TaskRecord rec, Job& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds / removes a task's entries in the queues, lease maps and job counters.
  void IndexTaskLocked(TaskRecord& t, Job& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnindexTaskLocked(TaskRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Shared store: the store picks and leases the task.
  std::optional<Lease> ClaimLocked(const std::string& worker_id, const std::set<std::string>& archs, int device)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs op; with a shared store, syncs and retries when another coordinator
  // got there first. A conflict that persists is UNAVAILABLE (retry later).
  absl::Status RetryShared(const std::function<absl::Status()>& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RenewLocked(const std::string& lease_id, const LeaseHolder* who) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CompleteLocked(const std::string& lease_id, const std::string& result, absl::Duration* ran,
                              bool verify, bool* requeued, const LeaseHolder* who) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FailInfraLocked(const std::string& lease_id, const std::string& detail, absl::Duration* ran,
                               const LeaseHolder* who) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PersistLocked(TaskRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `st`, reported to options.on_store_error when it is an error (ABORTED,
  // a lost compare-and-set race, is not one).
  absl::Status StoreResult(absl::Status st) const;
  void TickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueLocked(TaskRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the current attempt as an infrastructure failure; re-queues or finishes.
  absl::Status FinishAttemptLocked(TaskRecord& t, const std::string& detail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLeaseLocked(TaskRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkDoneLocked(TaskRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends to the job's completion order and failure count.
  void CountDoneLocked(Job& j, const TaskRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CancelTasksLocked(Job& j, JobState final_state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshJobLocked(Job& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TaskRecord* HeldLocked(const std::string& lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The held lease's task if `who` (null: anyone) holds it: FAILED_PRECONDITION
  // when not held, PERMISSION_DENIED / INVALID_ARGUMENT as for Renew.
  absl::StatusOr<TaskRecord*> HeldByLocked(const std::string& lease_id, const LeaseHolder* who)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* clock_;
  const SchedulerOptions options_;
  Store* const store_;  // may be null
  const bool shared_;   // store_ is shared with other coordinators
  mutable absl::Mutex mu_;
  uint64_t synced_rev_ ABSL_GUARDED_BY(mu_) = 0;  // store revision applied so far
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, TaskRecord> tasks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> lease_to_task_ ABSL_GUARDED_BY(mu_);
  // Per arch: queued task ids by (priority desc, arrival).
  std::map<std::string, std::map<QueueKey, std::string>> queues_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, QueueKey> queued_at_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, std::string>> expiries_ ABSL_GUARDED_BY(mu_);   // (expiry, lease id)
  std::set<std::pair<absl::Time, std::string>> deadlines_ ABSL_GUARDED_BY(mu_);  // (deadline, job id)
  // Completed (non-infra) results by dedup key, for reuse.
  absl::flat_hash_map<std::string, std::string> results_by_key_ ABSL_GUARDED_BY(mu_);
  int64_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, absl::Time> enqueued_at_ ABSL_GUARDED_BY(mu_);  // queue seq -> time (oldest first)
  int64_t lease_expiries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t retries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t verify_reruns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_SCHEDULER_H_
