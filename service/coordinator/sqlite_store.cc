#include "service/coordinator/sqlite_store.h"

#include <sqlite3.h>


#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "service/coordinator/store_codec.h"

namespace mxval {
namespace coordinator {
namespace {

// A prepared statement: owned (finalized on destruction), or borrowed from
// the store's cache (reset and unbound on destruction, ready for reuse).
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  explicit Stmt(sqlite3_stmt* cached) : s_(cached), rc_(cached ? SQLITE_OK : SQLITE_ERROR), owned_(false) {}
  ~Stmt() {
    if (owned_) {
      sqlite3_finalize(s_);
    } else if (s_ != nullptr) {
      sqlite3_reset(s_);
      sqlite3_clear_bindings(s_);
    }
  }
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return s_; }
  void Text(int i, const std::string& v) { sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT); }
  void Blob(int i, const std::string& v) { sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT); }
  void Int(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  std::string ColText(int i) {
    const unsigned char* p = sqlite3_column_text(s_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(s_, i)) : std::string();
  }
  std::string ColBlob(int i) {
    const void* p = sqlite3_column_blob(s_, i);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(s_, i)) : std::string();
  }
  int64_t ColInt(int i) { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_;
  bool owned_ = true;
};

constexpr int kTaskInsert = 0, kNextId = 1, kTaskUpdate = 2, kNextRev = 3;
// Column order of the tasks table (and of kTaskColumns below).
constexpr char kTaskInsertSql[] =
    "INSERT INTO tasks (task_id, job_id, seq, arch, dedup_key, payload, state, attempts, lease_id, lease_worker,"
    " lease_expiry_us, has_result, reused, infra_failed, result, first_result, last_worker, last_finished_us, rev)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)";
// Compare-and-set on the row's revision (?20 the one the writer read).
constexpr char kTaskUpdateSql[] =
    "UPDATE tasks SET state=?7, attempts=?8, lease_id=?9, lease_worker=?10, lease_expiry_us=?11, has_result=?12,"
    " reused=?13, infra_failed=?14, result=?15, first_result=?16, last_worker=?17, last_finished_us=?18, rev=?19"
    " WHERE task_id=?1 AND rev=?20";
constexpr char kNextIdSql[] = "UPDATE meta SET value = ?1 WHERE key = 'next_id'";
constexpr char kNextRevSql[] = "UPDATE meta SET value = value + 1 WHERE key = 'rev' RETURNING value";
constexpr char kTaskColumns[] =
    "t.task_id, t.job_id, t.arch, t.dedup_key, t.payload, t.state, t.attempts, t.lease_id, t.lease_worker,"
    " t.lease_expiry_us, t.has_result, t.reused, t.infra_failed, t.result, t.first_result, t.rev";
constexpr char kJobColumns[] =
    "job_id, request_id, priority, state, created_us, deadline_us, finished_us, reuse, payload, rev";

TaskRecord ReadTask(Stmt& st) {
  TaskRecord t;
  t.task_id = st.ColText(0);
  t.job_id = st.ColText(1);
  t.input.arch = st.ColText(2);
  t.input.dedup_key = st.ColText(3);
  t.input.payload = st.ColBlob(4);
  t.state = static_cast<TaskState>(st.ColInt(5));
  t.attempts = AttemptsFromJson(st.ColText(6));
  t.lease_id = st.ColText(7);
  t.lease_worker = st.ColText(8);
  t.lease_expiry = TimeFromUs(st.ColInt(9));
  t.has_result = st.ColInt(10) != 0;
  t.reused = st.ColInt(11) != 0;
  t.infra_failed = st.ColInt(12) != 0;
  t.result = st.ColBlob(13);
  t.first_result = st.ColBlob(14);
  t.rev = static_cast<uint64_t>(st.ColInt(15));
  return t;
}

StoredJob ReadJob(Stmt& st) {
  StoredJob j;
  j.status.job_id = st.ColText(0);
  j.status.request_id = st.ColText(1);
  j.status.priority = static_cast<int>(st.ColInt(2));
  j.status.state = static_cast<JobState>(st.ColInt(3));
  j.status.created = TimeFromUs(st.ColInt(4));
  if (st.ColInt(5) != kNoTime) j.status.deadline = TimeFromUs(st.ColInt(5));
  if (st.ColInt(6) != kNoTime) j.status.finished = TimeFromUs(st.ColInt(6));
  j.reuse = st.ColInt(7) != 0;
  j.status.payload = st.ColBlob(8);
  j.status.rev = static_cast<uint64_t>(st.ColInt(9));
  return j;
}

absl::Status Err(sqlite3* db, const std::string& what) {
  return absl::UnavailableError(absl::StrCat("store: ", what, ": ", sqlite3_errmsg(db)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path, SqliteStoreOptions options) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    absl::Status st = absl::UnavailableError(absl::StrCat("store: cannot open '", path, "': ", sqlite3_errmsg(db)));
    sqlite3_close(db);
    return st;
  }
  std::unique_ptr<SqliteStore> s(new SqliteStore(db, options.shared));
  absl::MutexLock l(&s->mu_);
  static const char* kSchema[] = {
      "PRAGMA busy_timeout=10000",
      "PRAGMA journal_mode=WAL",
      "PRAGMA synchronous=NORMAL",
      "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
      "CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, request_id TEXT, priority INTEGER, state INTEGER,"
      " created_us INTEGER, deadline_us INTEGER, finished_us INTEGER, reuse INTEGER, seq INTEGER, payload BLOB)",
      "CREATE TABLE IF NOT EXISTS tasks (task_id TEXT PRIMARY KEY, job_id TEXT, seq INTEGER, arch TEXT, dedup_key TEXT,"
      " payload BLOB, state INTEGER, attempts TEXT, lease_id TEXT, lease_worker TEXT, lease_expiry_us INTEGER,"
      " has_result INTEGER, reused INTEGER, infra_failed INTEGER, result BLOB)",
      "CREATE INDEX IF NOT EXISTS tasks_by_seq ON tasks(seq)",
      "INSERT OR IGNORE INTO meta VALUES ('schema_version', 1)",
      "INSERT OR IGNORE INTO meta VALUES ('next_id', 1)",
  };
  for (const char* sql : kSchema) {
    if (absl::Status st = s->Exec(sql); !st.ok()) return st;
  }
  // Versioned migrations, applied in order at start-up, each in a transaction
  // (BEGIN IMMEDIATE: a second process opening the file waits, then skips).
  static const std::pair<int, std::vector<const char*>> kMigrations[] = {
      {2, {"ALTER TABLE tasks ADD COLUMN first_result BLOB NOT NULL DEFAULT x''"}},  // triage re-runs
      {3, {"CREATE TABLE libraries (name TEXT PRIMARY KEY, payload BLOB NOT NULL)"}},  // admin registrations
      {4,  // revisions (change feed, compare-and-set) and claims by the store
       {"ALTER TABLE jobs ADD COLUMN rev INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE tasks ADD COLUMN rev INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE tasks ADD COLUMN last_worker TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE tasks ADD COLUMN last_finished_us INTEGER NOT NULL DEFAULT -9223372036854775808",
        "CREATE INDEX jobs_by_rev ON jobs(rev)", "CREATE INDEX tasks_by_rev ON tasks(rev)",
        "CREATE INDEX tasks_queued ON tasks(arch, rev) WHERE state = 0",
        "CREATE UNIQUE INDEX jobs_by_request ON jobs(request_id) WHERE request_id <> ''",
        "INSERT OR IGNORE INTO meta VALUES ('rev', 0)"}},
      {5,  // kernel library content, content-addressed, in chunks
       {"CREATE TABLE library_blobs (sha256 TEXT PRIMARY KEY, format INTEGER NOT NULL, size INTEGER NOT NULL,"
        " chunks INTEGER NOT NULL)",
        "CREATE TABLE library_blob_chunks (blob_key TEXT NOT NULL, idx INTEGER NOT NULL, data BLOB NOT NULL,"
        " PRIMARY KEY (blob_key, idx))"}},
  };
  for (const auto& [to, statements] : kMigrations) {
    if (absl::Status st = s->Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
    int64_t version = 1;
    {
      Stmt st(s->db_, "SELECT value FROM meta WHERE key = 'schema_version'");
      if (st.ok() && sqlite3_step(st.get()) == SQLITE_ROW) version = st.ColInt(0);
    }
    absl::Status st;
    if (version < to) {
      for (const char* sql : statements) {
        if (st.ok()) st = s->Exec(sql);
      }
      if (st.ok()) st = s->Exec(absl::StrCat("UPDATE meta SET value = ", to, " WHERE key = 'schema_version'").c_str());
    }
    if (!st.ok()) {
      (void)s->Exec("ROLLBACK");
      return st;
    }
    if (absl::Status c = s->Exec("COMMIT"); !c.ok()) return c;
  }
  return s;
}

SqliteStore::~SqliteStore() {
  absl::MutexLock l(&mu_);
  for (sqlite3_stmt* st : prepared_) sqlite3_finalize(st);
  sqlite3_close(db_);
}

sqlite3_stmt* SqliteStore::PreparedLocked(int slot, const char* sql) {
  if (prepared_[slot] == nullptr) sqlite3_prepare_v2(db_, sql, -1, &prepared_[slot], nullptr);
  return prepared_[slot];
}

absl::Status SqliteStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status st = absl::UnavailableError(absl::StrCat("store: ", sql, ": ", err ? err : "error"));
    sqlite3_free(err);
    return st;
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::WriteNextIdLocked(uint64_t next_id) {
  if (shared_) return absl::OkStatus();  // ids come from AllocateId
  Stmt st(PreparedLocked(kNextId, kNextIdSql));
  if (!st.ok()) return Err(db_, "prepare next_id");
  st.Int(1, static_cast<int64_t>(next_id));
  return sqlite3_step(st.get()) == SQLITE_DONE ? absl::OkStatus() : Err(db_, "next_id");
}

absl::StatusOr<uint64_t> SqliteStore::NextRevLocked() {
  Stmt st(PreparedLocked(kNextRev, kNextRevSql));
  if (!st.ok() || sqlite3_step(st.get()) != SQLITE_ROW) return Err(db_, "next revision");
  const uint64_t rev = static_cast<uint64_t>(st.ColInt(0));
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Err(db_, "next revision");
  return rev;
}

absl::Status SqliteStore::WriteTaskLocked(TaskRecord& t, bool insert) {
  auto rev = NextRevLocked();
  if (!rev.ok()) return rev.status();
  Stmt st(insert ? PreparedLocked(kTaskInsert, kTaskInsertSql) : PreparedLocked(kTaskUpdate, kTaskUpdateSql));
  if (!st.ok()) return Err(db_, "prepare task");
  // seq: position in the job (task ids are "<job>-t<i>"); global order comes from the job's seq.
  st.Text(1, t.task_id);
  st.Text(2, t.job_id);
  st.Int(3, TaskSeq(t.task_id));
  st.Text(4, t.input.arch);
  st.Text(5, t.input.dedup_key);
  st.Blob(6, t.input.payload);
  st.Int(7, static_cast<int>(t.state));
  st.Text(8, AttemptsToJson(t.attempts));
  st.Text(9, t.lease_id);
  st.Text(10, t.lease_worker);
  st.Int(11, TimeToUs(t.lease_expiry));
  st.Int(12, t.has_result);
  st.Int(13, t.reused);
  st.Int(14, t.infra_failed);
  st.Blob(15, t.result);
  st.Blob(16, t.first_result);
  st.Text(17, LastWorker(t));
  st.Int(18, LastFinishedUs(t));
  st.Int(19, static_cast<int64_t>(*rev));
  if (!insert) st.Int(20, static_cast<int64_t>(t.rev));
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Err(db_, "write task");
  if (!insert && sqlite3_changes(db_) != 1) {
    return absl::AbortedError(absl::StrCat("store: task ", t.task_id, " changed since revision ", t.rev));
  }
  t.rev = *rev;
  return absl::OkStatus();
}

absl::Status SqliteStore::InsertJob(StoredJob& job, std::vector<TaskRecord>& tasks, uint64_t next_id) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  auto fail = [&](absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)Exec("ROLLBACK");
    return st;
  };
  JobStatus& j = job.status;
  if (!j.request_id.empty()) {
    std::string existing;
    {
      Stmt st(db_, "SELECT job_id FROM jobs WHERE request_id = ?1");
      st.Text(1, j.request_id);
      if (st.ok() && sqlite3_step(st.get()) == SQLITE_ROW) existing = st.ColText(0);
    }
    if (!existing.empty()) return fail(absl::AlreadyExistsError(existing));
  }
  std::vector<uint64_t> old_revs;
  for (TaskRecord& t : tasks) {
    old_revs.push_back(t.rev);
    if (absl::Status st = WriteTaskLocked(t, /*insert=*/true); !st.ok()) return fail(st);
  }
  auto rev = NextRevLocked();
  if (!rev.ok()) return fail(rev.status());
  {
    Stmt st(db_, "INSERT INTO jobs (job_id, request_id, priority, state, created_us, deadline_us, finished_us, reuse,"
                 " seq, payload, rev) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, (SELECT COUNT(*) FROM jobs), ?9, ?10)");
    if (!st.ok()) return fail(Err(db_, "prepare job"));
    st.Text(1, j.job_id);
    st.Text(2, j.request_id);
    st.Int(3, j.priority);
    st.Int(4, static_cast<int>(j.state));
    st.Int(5, TimeToUs(j.created));
    st.Int(6, j.deadline ? TimeToUs(*j.deadline) : kNoTime);
    st.Int(7, j.finished ? TimeToUs(*j.finished) : kNoTime);
    st.Int(8, job.reuse);
    st.Blob(9, j.payload);
    st.Int(10, static_cast<int64_t>(*rev));
    if (sqlite3_step(st.get()) != SQLITE_DONE) return fail(Err(db_, "insert job"));
  }
  if (absl::Status st = WriteNextIdLocked(next_id); !st.ok()) return fail(st);
  if (absl::Status st = Exec("COMMIT"); !st.ok()) {
    (void)Exec("ROLLBACK");
    for (size_t i = 0; i < tasks.size(); ++i) tasks[i].rev = old_revs[i];
    return st;
  }
  j.rev = *rev;
  return absl::OkStatus();
}

absl::Status SqliteStore::UpdateTask(TaskRecord& task, uint64_t next_id) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  const uint64_t old_rev = task.rev;
  absl::Status st = WriteTaskLocked(task, /*insert=*/false);
  if (st.ok()) st = WriteNextIdLocked(next_id);
  if (st.ok()) st = Exec("COMMIT");
  if (!st.ok()) {
    (void)Exec("ROLLBACK");
    task.rev = old_rev;
  }
  return st;
}

absl::Status SqliteStore::UpdateJob(JobStatus& j) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  auto rev = NextRevLocked();
  absl::Status status = rev.status();
  if (status.ok()) {
    Stmt st(db_, "UPDATE jobs SET state = ?2, finished_us = ?3, rev = ?4 WHERE job_id = ?1");
    st.Text(1, j.job_id);
    st.Int(2, static_cast<int>(j.state));
    st.Int(3, j.finished ? TimeToUs(*j.finished) : kNoTime);
    st.Int(4, static_cast<int64_t>(*rev));
    if (sqlite3_step(st.get()) != SQLITE_DONE) status = Err(db_, "update job");
  }
  if (status.ok()) status = Exec("COMMIT");
  if (!status.ok()) {
    (void)Exec("ROLLBACK");
    return status;
  }
  j.rev = *rev;
  return absl::OkStatus();
}

absl::Status SqliteStore::ReadRowsLocked(const std::string& where_jobs, const std::string& where_tasks,
                                         uint64_t since, std::vector<StoredJob>* jobs,
                                         std::vector<TaskRecord>* tasks, uint64_t* rev) {
  {
    Stmt st(db_, "SELECT value FROM meta WHERE key = 'rev'");
    if (st.ok() && sqlite3_step(st.get()) == SQLITE_ROW) *rev = static_cast<uint64_t>(st.ColInt(0));
  }
  {
    Stmt st(db_, absl::StrCat("SELECT ", kJobColumns, " FROM jobs ", where_jobs).c_str());
    if (!st.ok()) return Err(db_, "load jobs");
    st.Int(1, static_cast<int64_t>(since));
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) jobs->push_back(ReadJob(st));
    if (rc != SQLITE_DONE) return Err(db_, "load jobs");
  }
  Stmt st(db_, absl::StrCat("SELECT ", kTaskColumns, " FROM tasks t JOIN jobs j ON t.job_id = j.job_id ", where_tasks)
                   .c_str());
  if (!st.ok()) return Err(db_, "load tasks");
  st.Int(1, static_cast<int64_t>(since));
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) tasks->push_back(ReadTask(st));
  return rc == SQLITE_DONE ? absl::OkStatus() : Err(db_, "load tasks");
}

absl::StatusOr<StoreSnapshot> SqliteStore::Load() {
  absl::MutexLock l(&mu_);
  StoreSnapshot snap;
  if (absl::Status st = Exec("BEGIN"); !st.ok()) return st;  // one consistent read
  {
    Stmt st(db_, "SELECT value FROM meta WHERE key = 'next_id'");
    if (sqlite3_step(st.get()) == SQLITE_ROW) snap.next_id = static_cast<uint64_t>(st.ColInt(0));
  }
  absl::Status st = ReadRowsLocked("WHERE ?1 >= 0 ORDER BY seq", "WHERE ?1 >= 0 ORDER BY j.seq, t.seq", 0, &snap.jobs,
                                   &snap.tasks, &snap.rev);
  (void)Exec("COMMIT");
  if (!st.ok()) return st;
  return snap;
}

absl::StatusOr<StoreChanges> SqliteStore::ChangesSince(uint64_t rev) {
  absl::MutexLock l(&mu_);
  StoreChanges c;
  c.rev = rev;
  if (absl::Status st = Exec("BEGIN"); !st.ok()) return st;
  absl::Status st = ReadRowsLocked("WHERE rev > ?1 ORDER BY rev", "WHERE t.rev > ?1 ORDER BY t.rev", rev, &c.jobs,
                                   &c.tasks, &c.rev);
  (void)Exec("COMMIT");
  if (!st.ok()) return st;
  return c;
}

absl::StatusOr<uint64_t> SqliteStore::AllocateId() {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "UPDATE meta SET value = value + 1 WHERE key = 'next_id' RETURNING value - 1");
  if (!st.ok() || sqlite3_step(st.get()) != SQLITE_ROW) return Err(db_, "allocate id");
  const uint64_t id = static_cast<uint64_t>(st.ColInt(0));
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Err(db_, "allocate id");
  return id;
}

absl::StatusOr<std::optional<TaskRecord>> SqliteStore::ClaimTask(const ClaimRequest& r) {
  absl::MutexLock l(&mu_);
  if (r.archs.empty()) return std::optional<TaskRecord>();
  // BEGIN IMMEDIATE takes SQLite's single write lock: claims by several
  // processes on one file are serialized (SQLite has no row locks to skip).
  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  std::string in;
  for (size_t i = 0; i < r.archs.size(); ++i) absl::StrAppend(&in, i ? "," : "", "?", i + 4);
  std::optional<TaskRecord> found;
  {
    Stmt st(db_, absl::StrCat("SELECT ", kTaskColumns, " FROM tasks t JOIN jobs j ON t.job_id = j.job_id",
                              " WHERE t.state = 0 AND j.state IN (0, 1) AND t.arch IN (", in, ")",
                              " AND NOT (t.last_worker = ?1 AND t.last_finished_us > ?2)",
                              " ORDER BY (t.last_worker = ?1), j.priority DESC, t.rev, t.seq LIMIT ?3")
                     .c_str());
    if (!st.ok()) {
      (void)Exec("ROLLBACK");
      return Err(db_, "prepare claim");
    }
    st.Text(1, r.worker_id);
    st.Int(2, TimeToUs(r.now - r.retry_elsewhere_grace));
    st.Int(3, 1);
    int i = 4;
    for (const std::string& a : r.archs) st.Text(i++, a);
    const int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) found = ReadTask(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      absl::Status e = Err(db_, "claim");
      (void)Exec("ROLLBACK");
      return e;
    }
  }
  if (!found) {
    (void)Exec("COMMIT");
    return found;
  }
  // The lease id names the revision the claim is written at.
  uint64_t next_rev = 0;
  {
    Stmt peek(db_, "SELECT value + 1 FROM meta WHERE key = 'rev'");
    if (peek.ok() && sqlite3_step(peek.get()) == SQLITE_ROW) next_rev = static_cast<uint64_t>(peek.ColInt(0));
  }
  TaskRecord leased = LeasedRow(*found, r, found->rev);
  leased.lease_id = LeaseIdAt(next_rev, r);
  absl::Status st = WriteTaskLocked(leased, /*insert=*/false);
  if (st.ok()) st = Exec("COMMIT");
  if (!st.ok()) {
    (void)Exec("ROLLBACK");
    return st;
  }
  return std::optional<TaskRecord>(std::move(leased));
}

absl::Status SqliteStore::PutLibrary(const std::string& name, const std::string& payload) {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "INSERT INTO libraries VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET payload = ?2");
  if (!st.ok()) return Err(db_, "prepare library");
  st.Text(1, name);
  st.Blob(2, payload);
  return sqlite3_step(st.get()) == SQLITE_DONE ? absl::OkStatus() : Err(db_, "write library");
}

absl::Status SqliteStore::DeleteLibrary(const std::string& name) {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "DELETE FROM libraries WHERE name = ?1");
  if (!st.ok()) return Err(db_, "prepare library delete");
  st.Text(1, name);
  return sqlite3_step(st.get()) == SQLITE_DONE ? absl::OkStatus() : Err(db_, "delete library");
}

absl::StatusOr<std::vector<std::string>> SqliteStore::LoadLibraries() {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "SELECT payload FROM libraries ORDER BY name");
  if (!st.ok()) return Err(db_, "prepare libraries");
  std::vector<std::string> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(st.ColBlob(0));
  if (rc != SQLITE_DONE) return Err(db_, "read libraries");
  return out;
}

absl::Status SqliteStore::PutBlobChunk(const std::string& upload, int64_t index, const std::string& data) {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "INSERT INTO library_blob_chunks VALUES (?1, ?2, ?3)");
  if (!st.ok()) return Err(db_, "prepare blob chunk");
  st.Text(1, upload);
  st.Int(2, index);
  st.Blob(3, data);
  return sqlite3_step(st.get()) == SQLITE_DONE ? absl::OkStatus() : Err(db_, "write blob chunk");
}

absl::Status SqliteStore::CommitBlob(const std::string& upload, const BlobInfo& info) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  auto fail = [&](absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)Exec("ROLLBACK");
    return st;
  };
  auto step = [&](const char* sql, const std::vector<std::string>& text, const char* what)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<int64_t> {
    Stmt st(db_, sql);
    if (!st.ok()) return Err(db_, what);
    for (size_t i = 0; i < text.size(); ++i) st.Text(static_cast<int>(i + 1), text[i]);
    const int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) return st.ColInt(0);
    if (rc != SQLITE_DONE) return Err(db_, what);
    return int64_t{sqlite3_changes(db_)};
  };
  auto have = step("SELECT COUNT(*) FROM library_blobs WHERE sha256 = ?1", {info.sha256}, "read blob");
  if (!have.ok()) return fail(have.status());
  if (*have > 0) {  // the same bytes are already stored: this upload's rows go
    if (auto d = step("DELETE FROM library_blob_chunks WHERE blob_key = ?1", {upload}, "drop upload"); !d.ok()) {
      return fail(d.status());
    }
  } else {
    auto rows = step("SELECT COUNT(*) FROM library_blob_chunks WHERE blob_key = ?1", {upload}, "count upload");
    if (!rows.ok()) return fail(rows.status());
    if (*rows != info.chunks) {
      return fail(absl::FailedPreconditionError(
          absl::StrCat("store: upload holds ", *rows, " chunks, the commit names ", info.chunks)));
    }
    for (const char* sql : {"DELETE FROM library_blob_chunks WHERE blob_key = ?2",
                            "UPDATE library_blob_chunks SET blob_key = ?2 WHERE blob_key = ?1"}) {
      if (auto r = step(sql, {upload, info.sha256}, "file blob"); !r.ok()) return fail(r.status());
    }
    Stmt st(db_, "INSERT INTO library_blobs VALUES (?1, ?2, ?3, ?4)");
    st.Text(1, info.sha256);
    st.Int(2, info.format);
    st.Int(3, info.size);
    st.Int(4, info.chunks);
    if (!st.ok() || sqlite3_step(st.get()) != SQLITE_DONE) return fail(Err(db_, "write blob"));
  }
  // Uploads that started a day ago and never committed.
  if (auto r = step("DELETE FROM library_blob_chunks WHERE blob_key LIKE 'upload/%' AND blob_key < ?1",
                    {StaleUploadBound(absl::Now())}, "drop stale uploads");
      !r.ok()) {
    return fail(r.status());
  }
  if (absl::Status st = Exec("COMMIT"); !st.ok()) return fail(st);
  return absl::OkStatus();
}

absl::Status SqliteStore::AbortBlob(const std::string& upload) {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "DELETE FROM library_blob_chunks WHERE blob_key = ?1");
  if (!st.ok()) return Err(db_, "prepare blob abort");
  st.Text(1, upload);
  return sqlite3_step(st.get()) == SQLITE_DONE ? absl::OkStatus() : Err(db_, "drop upload");
}

absl::StatusOr<std::optional<BlobInfo>> SqliteStore::GetBlob(const std::string& sha256) {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "SELECT format, size, chunks FROM library_blobs WHERE sha256 = ?1");
  if (!st.ok()) return Err(db_, "prepare blob");
  st.Text(1, sha256);
  const int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return std::optional<BlobInfo>();
  if (rc != SQLITE_ROW) return Err(db_, "read blob");
  return std::optional<BlobInfo>(
      BlobInfo{sha256, static_cast<int>(st.ColInt(0)), st.ColInt(1), st.ColInt(2)});
}

absl::StatusOr<std::string> SqliteStore::ReadBlobChunk(const std::string& sha256, int64_t index) {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "SELECT data FROM library_blob_chunks WHERE blob_key = ?1 AND idx = ?2");
  if (!st.ok()) return Err(db_, "prepare blob chunk");
  st.Text(1, sha256);
  st.Int(2, index);
  const int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("store: blob ", sha256, " has no chunk ", index));
  if (rc != SQLITE_ROW) return Err(db_, "read blob chunk");
  return st.ColBlob(0);
}

}  // namespace coordinator
}  // namespace mxval
