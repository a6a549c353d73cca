// The embedded default store: one SQLite file in WAL mode.
#ifndef MXVAL_SERVICE_COORDINATOR_SQLITE_STORE_H_
#define MXVAL_SERVICE_COORDINATOR_SQLITE_STORE_H_

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "service/coordinator/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace mxval {
namespace coordinator {

struct SqliteStoreOptions {
  // Several coordinator processes on one machine may open the file: ids and
  // leases are taken from the database (its write lock serializes claims).
  // For tests of the shared-store protocol and single-host pairs; fleets use
  // PostgreSQL.
  bool shared = false;
};

class SqliteStore : public Store {
 public:
  // Opens or creates the database; versioned migrations are applied at
  // start-up. UNAVAILABLE if the file cannot be opened or is not an mxval store.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path,
                                                           SqliteStoreOptions options = {});
  ~SqliteStore() override;

  absl::Status InsertJob(StoredJob& job, std::vector<TaskRecord>& tasks, uint64_t next_id) override;
  absl::Status UpdateTask(TaskRecord& task, uint64_t next_id) override;
  absl::Status UpdateJob(JobStatus& job) override;
  absl::StatusOr<StoreSnapshot> Load() override;
  bool shared() const override { return shared_; }
  absl::StatusOr<uint64_t> AllocateId() override;
  absl::StatusOr<std::optional<TaskRecord>> ClaimTask(const ClaimRequest& request) override;
  absl::StatusOr<StoreChanges> ChangesSince(uint64_t rev) override;
  absl::Status PutLibrary(const std::string& name, const std::string& payload) override;
  absl::Status DeleteLibrary(const std::string& name) override;
  absl::StatusOr<std::vector<std::string>> LoadLibraries() override;
  absl::Status PutBlobChunk(const std::string& upload, int64_t index, const std::string& data) override;
  absl::Status CommitBlob(const std::string& upload, const BlobInfo& info) override;
  absl::Status AbortBlob(const std::string& upload) override;
  absl::StatusOr<std::optional<BlobInfo>> GetBlob(const std::string& sha256) override;
  absl::StatusOr<std::string> ReadBlobChunk(const std::string& sha256, int64_t index) override;

 private:
  SqliteStore(sqlite3* db, bool shared) : shared_(shared), db_(db) {}
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts, or compare-and-sets on t.rev; stamps the next revision into t.
  absl::Status WriteTaskLocked(TaskRecord& t, bool insert) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> NextRevLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Jobs and tasks matching the clauses (?1 bound to `since`) and the store revision.
  absl::Status ReadRowsLocked(const std::string& where_jobs, const std::string& where_tasks, uint64_t since,
                              std::vector<StoredJob>* jobs, std::vector<TaskRecord>* tasks, uint64_t* rev)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteNextIdLocked(uint64_t next_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Prepared once, reused (reset + rebind) for every write.
  sqlite3_stmt* PreparedLocked(int slot, const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const bool shared_;
  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  sqlite3_stmt* prepared_[8] ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_SQLITE_STORE_H_
