#include "service/coordinator/sqlite_store.h"

#include <sqlite3.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mxval {
namespace coordinator {
namespace {

constexpr int64_t kNone = std::numeric_limits<int64_t>::min();

int64_t Us(absl::Time t) {
  if (t == absl::InfinitePast()) return kNone;
  return absl::ToUnixMicros(t);
}
absl::Time FromUs(int64_t us) { return us == kNone ? absl::InfinitePast() : absl::FromUnixMicros(us); }

std::string AttemptsJson(const std::vector<AttemptRecord>& attempts) {
  nlohmann::json a = nlohmann::json::array();
  for (const AttemptRecord& r : attempts) {
    a.push_back({{"w", r.worker_id}, {"s", Us(r.started)}, {"f", Us(r.finished)}, {"i", r.infra_failure}, {"d", r.detail},
              {"v", r.device}});
  }
  return a.dump();
}

std::vector<AttemptRecord> ParseAttempts(const std::string& text) {
  std::vector<AttemptRecord> out;
  nlohmann::json a = nlohmann::json::parse(text, nullptr, false);
  if (!a.is_array()) return out;
  for (const auto& r : a) {
    out.push_back(AttemptRecord{r.value("w", ""), FromUs(r.value("s", kNone)), FromUs(r.value("f", kNone)),
                                r.value("i", false), r.value("d", ""), r.value("v", 0)});
  }
  return out;
}

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

constexpr int kTaskUpsert = 0, kNextId = 1;
constexpr char kTaskUpsertSql[] =
    "INSERT INTO tasks VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
    " ON CONFLICT(task_id) DO UPDATE SET state=?7, attempts=?8, lease_id=?9, lease_worker=?10,"
    " lease_expiry_us=?11, has_result=?12, reused=?13, infra_failed=?14, result=?15, first_result=?16";
constexpr char kNextIdSql[] = "UPDATE meta SET value = ?1 WHERE key = 'next_id'";

absl::Status Err(sqlite3* db, const std::string& what) {
  return absl::UnavailableError(absl::StrCat("store: ", what, ": ", sqlite3_errmsg(db)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    absl::Status st = absl::UnavailableError(absl::StrCat("store: cannot open '", path, "': ", sqlite3_errmsg(db)));
    sqlite3_close(db);
    return st;
  }
  std::unique_ptr<SqliteStore> s(new SqliteStore(db));
  absl::MutexLock l(&s->mu_);
  static const char* kSchema[] = {
      "PRAGMA journal_mode=WAL",
      "PRAGMA synchronous=NORMAL",
      "PRAGMA busy_timeout=5000",
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
  // Versioned migrations, applied in order at start-up, each in a transaction.
  static const std::pair<int, const char*> kMigrations[] = {
      {2, "ALTER TABLE tasks ADD COLUMN first_result BLOB NOT NULL DEFAULT x''"},  // triage re-runs
      {3, "CREATE TABLE libraries (name TEXT PRIMARY KEY, payload BLOB NOT NULL)"},  // admin registrations
  };
  int64_t version = 1;
  {
    Stmt st(s->db_, "SELECT value FROM meta WHERE key = 'schema_version'");
    if (st.ok() && sqlite3_step(st.get()) == SQLITE_ROW) version = st.ColInt(0);
  }
  for (const auto& [to, sql] : kMigrations) {
    if (version >= to) continue;
    if (absl::Status st = s->Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
    absl::Status st = s->Exec(sql);
    if (st.ok()) st = s->Exec(absl::StrCat("UPDATE meta SET value = ", to, " WHERE key = 'schema_version'").c_str());
    if (!st.ok()) {
      (void)s->Exec("ROLLBACK");
      return st;
    }
    if (absl::Status c = s->Exec("COMMIT"); !c.ok()) return c;
    version = to;
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
  Stmt st(PreparedLocked(kNextId, kNextIdSql));
  if (!st.ok()) return Err(db_, "prepare next_id");
  st.Int(1, static_cast<int64_t>(next_id));
  return sqlite3_step(st.get()) == SQLITE_DONE ? absl::OkStatus() : Err(db_, "next_id");
}

absl::Status SqliteStore::WriteTaskLocked(const TaskRecord& t) {
  Stmt st(PreparedLocked(kTaskUpsert, kTaskUpsertSql));
  if (!st.ok()) return Err(db_, "prepare task");
  // seq: position in the job (task ids are "<job>-t<i>"); global order comes from the job's seq.
  const size_t t_pos = t.task_id.rfind("-t");
  st.Text(1, t.task_id);
  st.Text(2, t.job_id);
  st.Int(3, t_pos == std::string::npos ? 0 : std::stoll(t.task_id.substr(t_pos + 2)));
  st.Text(4, t.input.arch);
  st.Text(5, t.input.dedup_key);
  st.Blob(6, t.input.payload);
  st.Int(7, static_cast<int>(t.state));
  st.Text(8, AttemptsJson(t.attempts));
  st.Text(9, t.lease_id);
  st.Text(10, t.lease_worker);
  st.Int(11, Us(t.lease_expiry));
  st.Int(12, t.has_result);
  st.Int(13, t.reused);
  st.Int(14, t.infra_failed);
  st.Blob(15, t.result);
  st.Blob(16, t.first_result);
  return sqlite3_step(st.get()) == SQLITE_DONE ? absl::OkStatus() : Err(db_, "write task");
}

absl::Status SqliteStore::InsertJob(const StoredJob& job, const std::vector<TaskRecord>& tasks, uint64_t next_id) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  auto fail = [&](absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)Exec("ROLLBACK");
    return st;
  };
  {
    Stmt st(db_, "INSERT INTO jobs VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, (SELECT COUNT(*) FROM jobs), ?9)");
    if (!st.ok()) return fail(Err(db_, "prepare job"));
    const JobStatus& j = job.status;
    st.Text(1, j.job_id);
    st.Text(2, j.request_id);
    st.Int(3, j.priority);
    st.Int(4, static_cast<int>(j.state));
    st.Int(5, Us(j.created));
    st.Int(6, j.deadline ? Us(*j.deadline) : kNone);
    st.Int(7, j.finished ? Us(*j.finished) : kNone);
    st.Int(8, job.reuse);
    st.Blob(9, j.payload);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return fail(Err(db_, "insert job"));
  }
  for (const TaskRecord& t : tasks) {
    if (absl::Status st = WriteTaskLocked(t); !st.ok()) return fail(st);
  }
  if (absl::Status st = WriteNextIdLocked(next_id); !st.ok()) return fail(st);
  return Exec("COMMIT");
}

absl::Status SqliteStore::UpdateTask(const TaskRecord& task, uint64_t next_id) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  absl::Status st = WriteTaskLocked(task);
  if (st.ok()) st = WriteNextIdLocked(next_id);
  if (!st.ok()) {
    (void)Exec("ROLLBACK");
    return st;
  }
  return Exec("COMMIT");
}

absl::Status SqliteStore::UpdateJob(const JobStatus& j) {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "UPDATE jobs SET state = ?2, finished_us = ?3 WHERE job_id = ?1");
  st.Text(1, j.job_id);
  st.Int(2, static_cast<int>(j.state));
  st.Int(3, j.finished ? Us(*j.finished) : kNone);
  return sqlite3_step(st.get()) == SQLITE_DONE ? absl::OkStatus() : Err(db_, "update job");
}

absl::StatusOr<StoreSnapshot> SqliteStore::Load() {
  absl::MutexLock l(&mu_);
  StoreSnapshot snap;
  {
    Stmt st(db_, "SELECT value FROM meta WHERE key = 'next_id'");
    if (sqlite3_step(st.get()) == SQLITE_ROW) snap.next_id = static_cast<uint64_t>(st.ColInt(0));
  }
  {
    Stmt st(db_,
            "SELECT job_id, request_id, priority, state, created_us, deadline_us, finished_us, reuse, payload FROM jobs"
            " ORDER BY seq");
    if (!st.ok()) return Err(db_, "load jobs");
    while (sqlite3_step(st.get()) == SQLITE_ROW) {
      StoredJob j;
      j.status.job_id = st.ColText(0);
      j.status.request_id = st.ColText(1);
      j.status.priority = static_cast<int>(st.ColInt(2));
      j.status.state = static_cast<JobState>(st.ColInt(3));
      j.status.created = FromUs(st.ColInt(4));
      if (st.ColInt(5) != kNone) j.status.deadline = FromUs(st.ColInt(5));
      if (st.ColInt(6) != kNone) j.status.finished = FromUs(st.ColInt(6));
      j.reuse = st.ColInt(7) != 0;
      j.status.payload = st.ColBlob(8);
      snap.jobs.push_back(std::move(j));
    }
  }
  {
    Stmt st(db_,
            "SELECT t.task_id, t.job_id, t.arch, t.dedup_key, t.payload, t.state, t.attempts, t.lease_id, t.lease_worker,"
            " t.lease_expiry_us, t.has_result, t.reused, t.infra_failed, t.result, t.first_result FROM tasks t JOIN jobs j"
            " ON t.job_id = j.job_id ORDER BY j.seq, t.seq");
    if (!st.ok()) return Err(db_, "load tasks");
    while (sqlite3_step(st.get()) == SQLITE_ROW) {
      TaskRecord t;
      t.task_id = st.ColText(0);
      t.job_id = st.ColText(1);
      t.input.arch = st.ColText(2);
      t.input.dedup_key = st.ColText(3);
      t.input.payload = st.ColBlob(4);
      t.state = static_cast<TaskState>(st.ColInt(5));
      t.attempts = ParseAttempts(st.ColText(6));
      t.lease_id = st.ColText(7);
      t.lease_worker = st.ColText(8);
      t.lease_expiry = FromUs(st.ColInt(9));
      t.has_result = st.ColInt(10) != 0;
      t.reused = st.ColInt(11) != 0;
      t.infra_failed = st.ColInt(12) != 0;
      t.result = st.ColBlob(13);
      t.first_result = st.ColBlob(14);
      snap.tasks.push_back(std::move(t));
    }
  }
  return snap;
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

}  // namespace coordinator
}  // namespace mxval
