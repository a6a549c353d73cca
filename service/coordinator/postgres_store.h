// The shared store: PostgreSQL through libpq, for several coordinators on one
// database (a fleet behind one Service, or an active/standby pair).
//
// Leases are claimed with SELECT ... FOR UPDATE SKIP LOCKED (two coordinators
// polling at once take different tasks, neither waits for the other), task
// writes are compare-and-set on the row revision, and the schema is migrated
// at start-up under an advisory lock (versions in `schema_migrations`), so
// coordinators of one release can start together against an empty database.
//
// One connection, guarded by a mutex; a broken connection is re-established
// on the next call (the call that found it broken returns UNAVAILABLE and the
// scheduler's caller retries, as with any store error).
#ifndef MXVAL_SERVICE_COORDINATOR_POSTGRES_STORE_H_
#define MXVAL_SERVICE_COORDINATOR_POSTGRES_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "service/coordinator/store.h"

typedef struct pg_conn PGconn;

namespace mxval {
namespace coordinator {

class PostgresStore : public Store {
 public:
  // `conninfo`: a libpq connection string or URI
  // ("postgresql://mxval@db.example:5432/mxval?sslmode=verify-full").
  // UNAVAILABLE if the server cannot be reached or a migration fails.
  static absl::StatusOr<std::unique_ptr<PostgresStore>> Open(const std::string& conninfo);
  ~PostgresStore() override;

  // The newest schema version this build knows.
  static int SchemaVersion();

  absl::Status InsertJob(StoredJob& job, std::vector<TaskRecord>& tasks, uint64_t next_id) override;
  absl::Status UpdateTask(TaskRecord& task, uint64_t next_id) override;
  absl::Status UpdateJob(JobStatus& job) override;
  absl::StatusOr<StoreSnapshot> Load() override;
  bool shared() const override { return true; }
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

  class Query;  // one statement with parameters (postgres_store.cc)

 private:
  explicit PostgresStore(PGconn* conn) : conn_(conn) {}
  absl::Status MigrateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-establishes a broken connection.
  absl::Status ConnectedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ExecLocked(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Compare-and-set write of a task row; `lease_from_rev` names the lease
  // after the new revision (claims).
  absl::Status WriteTaskLocked(TaskRecord& t, bool lease_from_rev) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReadRowsLocked(const std::string& where_jobs, const std::string& where_tasks, uint64_t since,
                              std::vector<StoredJob>* jobs, std::vector<TaskRecord>* tasks, uint64_t* rev)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  PGconn* conn_ ABSL_GUARDED_BY(mu_);
  // Statements prepared on this connection: SQL text -> statement name.
  std::map<std::string, std::string> prepared_ ABSL_GUARDED_BY(mu_);
};

// True for the --db values that name a PostgreSQL database
// ("postgresql://...", "postgres://...", or a "key=value" conninfo string).
bool IsPostgresUri(const std::string& db);

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_POSTGRES_STORE_H_
