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

class SqliteStore : public Store {
 public:
  // Opens or creates the database (schema created on first use).
  // UNAVAILABLE if the file cannot be opened or is not an mxval store.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  ~SqliteStore() override;

  absl::Status InsertJob(const StoredJob& job, const std::vector<TaskRecord>& tasks, uint64_t next_id) override;
  absl::Status UpdateTask(const TaskRecord& task, uint64_t next_id) override;
  absl::Status UpdateJob(const JobStatus& job) override;
  absl::StatusOr<StoreSnapshot> Load() override;
  absl::Status PutLibrary(const std::string& name, const std::string& payload) override;
  absl::Status DeleteLibrary(const std::string& name) override;
  absl::StatusOr<std::vector<std::string>> LoadLibraries() override;

 private:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteTaskLocked(const TaskRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteNextIdLocked(uint64_t next_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Prepared once, reused (reset + rebind) for every write.
  sqlite3_stmt* PreparedLocked(int slot, const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  sqlite3_stmt* prepared_[8] ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_SQLITE_STORE_H_
