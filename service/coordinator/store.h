// Durable coordinator state behind an interface: SQLite (the embedded
// default, one coordinator per file) and PostgreSQL (several coordinators on
// one database).
//
// The scheduler writes every transition through the store *before* applying
// it in memory, so whatever a caller was told (job accepted, lease granted,
// result recorded) survives a crash; on start it rebuilds from Load().
//
// Revisions: every write of a job or task row takes the next value of one
// store-wide counter and stamps it into the row (`rev`). The counter is taken
// last in each write transaction and its row lock is held to commit, so
// revisions become visible in order: a reader that has seen revision R has
// seen every change up to R. Task writes are compare-and-set on the row's
// revision (ABORTED if another writer got there first). A shared store
// (shared() == true) lets several coordinators use one database: they take
// ids and leases from it (AllocateId, ClaimTask) and follow each other's
// changes with ChangesSince.
#ifndef MXVAL_SERVICE_COORDINATOR_STORE_H_
#define MXVAL_SERVICE_COORDINATOR_STORE_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
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
  uint64_t rev = 0;  // the revision the snapshot is at
};

// Rows written after a revision, in revision order, and the revision they
// bring the reader to.
struct StoreChanges {
  std::vector<StoredJob> jobs;
  std::vector<TaskRecord> tasks;
  uint64_t rev = 0;
};

// What a worker asks for when it polls (shared stores pick the task).
// The random part of a lease id (bytes; hex in the id): a lease id is a
// bearer secret of its worker, so no caller can guess another's.
inline constexpr size_t kLeaseSecretBytes = 16;

struct ClaimRequest {
  std::string worker_id;
  std::string lease_secret;  // hex, appended to the lease id
  std::set<std::string> archs;
  int device = 0;
  absl::Time now;
  absl::Duration lease_duration;
  // A task whose last attempt ran on this worker and ended less than this
  // long ago is not offered to it; one that ever ran there comes last.
  absl::Duration retry_elsewhere_grace;
};

// Stored content of a kernel library (KernelLibraryRegistration.sha256):
// content-addressed, in rows of at most kBlobChunkBytes.
inline constexpr int64_t kBlobChunkBytes = int64_t{1} << 20;
struct BlobInfo {
  std::string sha256;  // of the whole content
  int format = 0;      // v1::LibraryFormat
  int64_t size = 0;    // bytes
  int64_t chunks = 0;  // rows 0 .. chunks-1
};

class Store {
 public:
  virtual ~Store() = default;
  // Inserts a job with all its tasks atomically (all or nothing) and stamps
  // their revisions. ALREADY_EXISTS (message: the existing job id) if a job
  // with the same non-empty request id is stored; UNAVAILABLE on I/O errors.
  virtual absl::Status InsertJob(StoredJob& job, std::vector<TaskRecord>& tasks, uint64_t next_id) = 0;
  // Writes the whole task row (state, attempts, lease, result) if its stored
  // revision is still task.rev, and sets task.rev to the new revision.
  // ABORTED if another writer changed the row since; UNAVAILABLE on I/O.
  // `next_id` is the caller's id counter (ignored by shared stores).
  virtual absl::Status UpdateTask(TaskRecord& task, uint64_t next_id) = 0;
  // Writes the job's state and finish time; sets job.rev.
  virtual absl::Status UpdateJob(JobStatus& job) = 0;
  virtual absl::StatusOr<StoreSnapshot> Load() = 0;

  // Several coordinators may use this store at once.
  virtual bool shared() const { return false; }
  // A fresh id, unique across every coordinator on the store.
  virtual absl::StatusOr<uint64_t> AllocateId() {
    return absl::UnimplementedError("store: not a shared store");
  }
  // Atomically picks the best queued task for the request (highest job
  // priority, then the longest queued; one that ran on this worker last) and
  // leases it: state LEASED, lease id "lease-r<rev>-<secret>", a new attempt. Rows
  // another coordinator is claiming at the same moment are skipped, not
  // waited for. nullopt when nothing fits.
  virtual absl::StatusOr<std::optional<TaskRecord>> ClaimTask(const ClaimRequest& request) {
    return absl::UnimplementedError("store: not a shared store");
  }
  // Job and task rows written after `rev`.
  virtual absl::StatusOr<StoreChanges> ChangesSince(uint64_t rev) {
    return absl::UnimplementedError("store: not a shared store");
  }

  // Registered kernel libraries (serialized KernelLibraryRegistration by
  // name). Stores that do not keep them answer UNIMPLEMENTED / nothing.
  virtual absl::Status PutLibrary(const std::string& name, const std::string& payload) {
    return absl::UnimplementedError("store: kernel library registrations are not persisted");
  }
  virtual absl::Status DeleteLibrary(const std::string& name) {
    return absl::UnimplementedError("store: kernel library registrations are not persisted");
  }
  virtual absl::StatusOr<std::vector<std::string>> LoadLibraries() { return std::vector<std::string>{}; }

  // Kernel library content (see BlobInfo). An upload writes its chunks under
  // its own `upload` key (unique per upload: NewUploadKey), invisible to
  // readers, then CommitBlob files them under info.sha256 in one
  // transaction, or drops them when that digest is already stored (several
  // coordinators may upload the same bytes at once). Nothing checks digests
  // here: the caller verified them. Rows of uploads that never committed
  // (a coordinator that died mid-upload) are removed by a later commit once
  // they are a day old. Stores that keep no content answer UNIMPLEMENTED.
  virtual absl::Status PutBlobChunk(const std::string& upload, int64_t index, const std::string& data) {
    return absl::UnimplementedError("store: kernel library content is not stored");
  }
  // FAILED_PRECONDITION if the upload does not hold exactly info.chunks rows.
  virtual absl::Status CommitBlob(const std::string& upload, const BlobInfo& info) {
    return absl::UnimplementedError("store: kernel library content is not stored");
  }
  virtual absl::Status AbortBlob(const std::string& upload) {
    return absl::UnimplementedError("store: kernel library content is not stored");
  }
  // nullopt when no content with that digest is stored.
  virtual absl::StatusOr<std::optional<BlobInfo>> GetBlob(const std::string& sha256) {
    return std::optional<BlobInfo>();
  }
  // NOT_FOUND if the row is missing.
  virtual absl::StatusOr<std::string> ReadBlobChunk(const std::string& sha256, int64_t index) {
    return absl::NotFoundError("store: kernel library content is not stored");
  }
};

// A fresh upload key for PutBlobChunk: "upload/<20-digit microseconds>/<random>",
// ordered by time (stale uploads are found by comparing keys).
std::string NewUploadKey(absl::Time now);
// The key below which uploads started before `now - 1 day` sort.
std::string StaleUploadBound(absl::Time now);

inline std::string LeaseIdAt(uint64_t rev, const ClaimRequest& r) {
  return "lease-r" + std::to_string(rev) + "-" + r.lease_secret;
}

// The lease a claim grants: the task row as ClaimTask leaves it (before the
// revision is stamped). Shared by the store implementations.
inline TaskRecord LeasedRow(TaskRecord t, const ClaimRequest& r, uint64_t rev) {
  t.state = TaskState::kLeased;
  t.lease_id = LeaseIdAt(rev, r);
  t.lease_worker = r.worker_id;
  t.lease_expiry = r.now + r.lease_duration;
  t.attempts.push_back(AttemptRecord{r.worker_id, r.now, absl::InfinitePast(), false, "", r.device});
  t.rev = rev;
  return t;
}

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_STORE_H_
