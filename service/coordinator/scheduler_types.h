// Plain records of the coordinator's scheduling state (shared by the
// scheduler and the stores).
#ifndef MXVAL_SERVICE_COORDINATOR_SCHEDULER_TYPES_H_
#define MXVAL_SERVICE_COORDINATOR_SCHEDULER_TYPES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace mxval {
namespace coordinator {

// What the scheduler needs to know about one task of a job.
struct TaskInput {
  std::string arch;       // pool that may run it
  std::string dedup_key;  // identical work has equal keys
  std::string payload;    // opaque (the serialized TaskSpec)
};

struct JobInput {
  std::string request_id;  // idempotency key; empty: none
  int priority = 0;        // higher first
  std::optional<absl::Duration> deadline;
  bool reuse_results = false;
  std::string payload;  // opaque (the serialized JobSpec)
  std::vector<TaskInput> tasks;
};

enum class TaskState { kQueued, kLeased, kDone, kCancelled };
enum class JobState { kQueued, kRunning, kDone, kCancelled, kExpired };

struct AttemptRecord {
  std::string worker_id;
  absl::Time started, finished;
  bool infra_failure = false;
  std::string detail;  // "lease expired", exit code / signal, "failed; re-run to verify"
  int device = 0;      // the worker's device index
};

struct TaskRecord {
  std::string task_id, job_id;
  TaskInput input;
  TaskState state = TaskState::kQueued;
  std::vector<AttemptRecord> attempts;
  std::string lease_id, lease_worker;
  absl::Time lease_expiry;
  bool has_result = false;
  bool reused = false;
  bool infra_failed = false;  // DONE because every attempt failed on infrastructure
  std::string result;         // opaque (the serialized TaskResult)
  // The first result when a failing task was re-run to verify it (triage
  // compares the two runs on the same inputs); empty otherwise.
  std::string first_result;
  // The store revision of the last write of this row (0: never written).
  // Writes are compare-and-set on it, so a coordinator never overwrites a
  // change another coordinator on the same database made.
  uint64_t rev = 0;
};

struct JobStatus {
  std::string job_id, request_id;
  JobState state = JobState::kQueued;
  int priority = 0;
  absl::Time created;
  std::optional<absl::Time> deadline, finished;
  int tasks_total = 0, tasks_done = 0, tasks_running = 0;
  int tasks_failed = 0;  // DONE tasks the failure predicate calls failed
  std::string payload;  // opaque (the serialized JobSpec)
  uint64_t rev = 0;     // the store revision of the job row's last write
};

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_SCHEDULER_TYPES_H_
