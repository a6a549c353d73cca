// Durable coordinator state behind an interface (SQLite now, PostgreSQL later).
//
// The scheduler writes every transition through the store *before* applying
// it in memory, so whatever a caller was told (job accepted, lease granted,
// result recorded) survives a crash; on start it rebuilds from Load().
#ifndef MXVAL_SERVICE_COORDINATOR_STORE_H_
#define MXVAL_SERVICE_COORDINATOR_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "service/coordinator/scheduler_types.h"

namespace mxval {
namespace coordinator {

struct StoredJob {
  JobStatus status;  // counters are recomputed from tasks on load
  bool reuse = false;
};

struct StoreSnapshot {
  std::vector<StoredJob> jobs;
  std::vector<TaskRecord> tasks;  // in submission order
  uint64_t next_id = 1;
};

class Store {
 public:
  virtual ~Store() = default;
  // Inserts a job with all its tasks atomically (all or nothing).
  virtual absl::Status InsertJob(const StoredJob& job, const std::vector<TaskRecord>& tasks, uint64_t next_id) = 0;
  // Writes the whole task row (state, attempts, lease, result).
  virtual absl::Status UpdateTask(const TaskRecord& task, uint64_t next_id) = 0;
  // Writes the job's state and finish time.
  virtual absl::Status UpdateJob(const JobStatus& job) = 0;
  virtual absl::StatusOr<StoreSnapshot> Load() = 0;

  // Registered kernel libraries (serialized KernelLibraryRegistration by
  // name). Stores that do not keep them answer UNIMPLEMENTED / nothing.
  virtual absl::Status PutLibrary(const std::string& name, const std::string& payload) {
    return absl::UnimplementedError("store: kernel library registrations are not persisted");
  }
  virtual absl::Status DeleteLibrary(const std::string& name) {
    return absl::UnimplementedError("store: kernel library registrations are not persisted");
  }
  virtual absl::StatusOr<std::vector<std::string>> LoadLibraries() { return std::vector<std::string>{}; }
};

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_STORE_H_
