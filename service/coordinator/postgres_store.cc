#include "service/coordinator/postgres_store.h"

#include <libpq-fe.h>

#include <cstdlib>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "service/coordinator/store_codec.h"

namespace mxval {
namespace coordinator {
namespace {

// Versioned migrations: applied in order, once, in one transaction under an
// advisory lock. Append only; never edit a released entry.
const std::vector<std::vector<const char*>>& Migrations() {
  static const auto* m = new std::vector<std::vector<const char*>>{
      {  // 1: the base schema (counters, jobs, tasks, library registrations)
       "CREATE TABLE meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
       "INSERT INTO meta VALUES ('next_id', 1), ('rev', 0)",
       "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, request_id TEXT NOT NULL, priority INTEGER NOT NULL,"
       " state INTEGER NOT NULL, created_us BIGINT NOT NULL, deadline_us BIGINT NOT NULL, finished_us BIGINT NOT NULL,"
       " reuse BOOLEAN NOT NULL, seq BIGINT NOT NULL, payload BYTEA NOT NULL, rev BIGINT NOT NULL)",
       "CREATE UNIQUE INDEX jobs_by_request ON jobs(request_id) WHERE request_id <> ''",
       "CREATE INDEX jobs_by_rev ON jobs(rev)",
       "CREATE TABLE tasks (task_id TEXT PRIMARY KEY, job_id TEXT NOT NULL REFERENCES jobs(job_id),"
       " seq BIGINT NOT NULL, arch TEXT NOT NULL, dedup_key TEXT NOT NULL, payload BYTEA NOT NULL,"
       " state INTEGER NOT NULL, attempts TEXT NOT NULL, lease_id TEXT NOT NULL, lease_worker TEXT NOT NULL,"
       " lease_expiry_us BIGINT NOT NULL, has_result BOOLEAN NOT NULL, reused BOOLEAN NOT NULL,"
       " infra_failed BOOLEAN NOT NULL, result BYTEA NOT NULL, first_result BYTEA NOT NULL,"
       " last_worker TEXT NOT NULL, last_finished_us BIGINT NOT NULL, rev BIGINT NOT NULL)",
       "CREATE INDEX tasks_by_rev ON tasks(rev)",
       "CREATE INDEX tasks_by_job ON tasks(job_id, seq)",
       "CREATE INDEX tasks_queued ON tasks(arch, rev) WHERE state = 0",
       "CREATE TABLE libraries (name TEXT PRIMARY KEY, payload BYTEA NOT NULL)"},
      {  // 2: claims walk an index in queue order instead of sorting the queue
       "ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
       "UPDATE tasks t SET priority = j.priority FROM jobs j WHERE j.job_id = t.job_id",
       "DROP INDEX tasks_queued",
       "CREATE INDEX tasks_claim ON tasks(arch, priority DESC, rev) WHERE state = 0"},
      {  // 3: kernel library content, content-addressed, in chunks
       "CREATE TABLE library_blobs (sha256 TEXT PRIMARY KEY, format INTEGER NOT NULL, size BIGINT NOT NULL,"
       " chunks BIGINT NOT NULL)",
       "CREATE TABLE library_blob_chunks (blob_key TEXT NOT NULL, idx BIGINT NOT NULL, data BYTEA NOT NULL,"
       " PRIMARY KEY (blob_key, idx))"},
  };
  return *m;
}

constexpr int64_t kMigrationLock = 0x6d7876616c;  // "mxval"

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

constexpr char kTaskColumns[] =
    "t.task_id, t.job_id, t.arch, t.dedup_key, t.payload, t.state, t.attempts, t.lease_id, t.lease_worker,"
    " t.lease_expiry_us, t.has_result, t.reused, t.infra_failed, t.result, t.first_result, t.rev";
constexpr char kJobColumns[] =
    "job_id, request_id, priority, state, created_us, deadline_us, finished_us, reuse, payload, rev";

std::string Text(PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), PQgetlength(r, row, col));
}
int64_t Int(PGresult* r, int row, int col) {
  int64_t v = 0;
  (void)absl::SimpleAtoi(PQgetvalue(r, row, col), &v);
  return v;
}
bool Bool(PGresult* r, int row, int col) { return PQgetvalue(r, row, col)[0] == 't'; }
std::string Bytes(PGresult* r, int row, int col) {
  size_t n = 0;
  unsigned char* p = PQunescapeBytea(reinterpret_cast<const unsigned char*>(PQgetvalue(r, row, col)), &n);
  if (p == nullptr) return std::string();
  std::string out(reinterpret_cast<const char*>(p), n);
  PQfreemem(p);
  return out;
}

TaskRecord ReadTask(PGresult* r, int i) {
  TaskRecord t;
  t.task_id = Text(r, i, 0);
  t.job_id = Text(r, i, 1);
  t.input.arch = Text(r, i, 2);
  t.input.dedup_key = Text(r, i, 3);
  t.input.payload = Bytes(r, i, 4);
  t.state = static_cast<TaskState>(Int(r, i, 5));
  t.attempts = AttemptsFromJson(Text(r, i, 6));
  t.lease_id = Text(r, i, 7);
  t.lease_worker = Text(r, i, 8);
  t.lease_expiry = TimeFromUs(Int(r, i, 9));
  t.has_result = Bool(r, i, 10);
  t.reused = Bool(r, i, 11);
  t.infra_failed = Bool(r, i, 12);
  t.result = Bytes(r, i, 13);
  t.first_result = Bytes(r, i, 14);
  t.rev = static_cast<uint64_t>(Int(r, i, 15));
  return t;
}

StoredJob ReadJob(PGresult* r, int i) {
  StoredJob j;
  j.status.job_id = Text(r, i, 0);
  j.status.request_id = Text(r, i, 1);
  j.status.priority = static_cast<int>(Int(r, i, 2));
  j.status.state = static_cast<JobState>(Int(r, i, 3));
  j.status.created = TimeFromUs(Int(r, i, 4));
  if (Int(r, i, 5) != kNoTime) j.status.deadline = TimeFromUs(Int(r, i, 5));
  if (Int(r, i, 6) != kNoTime) j.status.finished = TimeFromUs(Int(r, i, 6));
  j.reuse = Bool(r, i, 7);
  j.status.payload = Bytes(r, i, 8);
  j.status.rev = static_cast<uint64_t>(Int(r, i, 9));
  return j;
}

std::string Trimmed(const char* msg) {
  std::string s(msg ? msg : "");
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

// One statement with parameters: text, except bytea parameters, which travel
// in binary (no escaping).
class PostgresStore::Query {
 public:
  explicit Query(std::string sql) : sql_(std::move(sql)) {}
  Query& Str(std::string v) { return Add(std::move(v), 0); }
  Query& Bin(std::string v) { return Add(std::move(v), 1); }
  Query& I64(int64_t v) { return Add(std::to_string(v), 0); }
  Query& B(bool v) { return Add(v ? "true" : "false", 0); }
  // The columns a task's life changes, in table order from `state` to
  // `last_finished_us` (12 parameters).
  Query& State(const TaskRecord& t) {
    return I64(static_cast<int>(t.state))
        .Str(AttemptsToJson(t.attempts))
        .Str(t.lease_id)
        .Str(t.lease_worker)
        .I64(TimeToUs(t.lease_expiry))
        .B(t.has_result)
        .B(t.reused)
        .B(t.infra_failed)
        .Bin(t.result)
        .Bin(t.first_result)
        .Str(LastWorker(t))
        .I64(LastFinishedUs(t));
  }
  // Runs the statement, prepared once per connection (planning costs more
  // than executing these). UNAVAILABLE (with the server's message) unless it
  // returns `want` (PGRES_COMMAND_OK or PGRES_TUPLES_OK).
  absl::StatusOr<Result> Run(PostgresStore* store, ExecStatusType want, const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(store->mu_) {
    PGconn* c = store->conn_;
    auto it = store->prepared_.find(sql_);
    if (it == store->prepared_.end()) {
      const std::string name = absl::StrCat("mxval_", store->prepared_.size());
      Result p(PQprepare(c, name.c_str(), sql_.c_str(), static_cast<int>(values_.size()), nullptr));
      if (p == nullptr || PQresultStatus(p.get()) != PGRES_COMMAND_OK) {
        return absl::UnavailableError(absl::StrCat("store: prepare ", what, ": ",
                                                   Trimmed(p ? PQresultErrorMessage(p.get()) : PQerrorMessage(c))));
      }
      it = store->prepared_.emplace(sql_, name).first;
    }
    std::vector<const char*> values;
    std::vector<int> lengths;
    for (const std::string& v : values_) {
      values.push_back(v.data());
      lengths.push_back(static_cast<int>(v.size()));
    }
    Result r(PQexecPrepared(c, it->second.c_str(), static_cast<int>(values_.size()), values.data(), lengths.data(),
                            formats_.data(), 0));
    if (r == nullptr || PQresultStatus(r.get()) != want) {
      return absl::UnavailableError(
          absl::StrCat("store: ", what, ": ", Trimmed(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(c))));
    }
    return r;
  }

 private:
  Query& Add(std::string v, int format) {
    values_.push_back(std::move(v));
    formats_.push_back(format);
    return *this;
  }
  std::string sql_;
  std::vector<std::string> values_;
  std::vector<int> formats_;
};

bool IsPostgresUri(const std::string& db) {
  return absl::StartsWith(db, "postgresql://") || absl::StartsWith(db, "postgres://") ||
         absl::StrContains(db, "dbname=") || absl::StartsWith(db, "host=");
}

int PostgresStore::SchemaVersion() { return static_cast<int>(Migrations().size()); }

absl::StatusOr<std::unique_ptr<PostgresStore>> PostgresStore::Open(const std::string& conninfo) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  if (c == nullptr || PQstatus(c) != CONNECTION_OK) {
    // The connection string is not echoed: it may hold a password.
    absl::Status st = absl::UnavailableError(
        absl::StrCat("store: cannot connect to PostgreSQL: ", Trimmed(c ? PQerrorMessage(c) : "out of memory")));
    PQfinish(c);
    return st;
  }
  std::unique_ptr<PostgresStore> s(new PostgresStore(c));
  absl::MutexLock l(&s->mu_);
  if (absl::Status st = s->ExecLocked("SET client_min_messages = warning"); !st.ok()) return st;
  if (absl::Status st = s->MigrateLocked(); !st.ok()) return st;
  return s;
}

PostgresStore::~PostgresStore() {
  absl::MutexLock l(&mu_);
  PQfinish(conn_);
}

absl::Status PostgresStore::ConnectedLocked() {
  if (PQstatus(conn_) == CONNECTION_OK) return absl::OkStatus();
  PQreset(conn_);
  prepared_.clear();  // a new session: nothing is prepared on it
  if (PQstatus(conn_) == CONNECTION_OK) return ExecLocked("SET client_min_messages = warning");
  return absl::UnavailableError(absl::StrCat("store: PostgreSQL connection lost: ", Trimmed(PQerrorMessage(conn_))));
}

absl::Status PostgresStore::ExecLocked(const char* sql) {
  Result r(PQexec(conn_, sql));
  if (r == nullptr || (PQresultStatus(r.get()) != PGRES_COMMAND_OK && PQresultStatus(r.get()) != PGRES_TUPLES_OK)) {
    return absl::UnavailableError(
        absl::StrCat("store: ", sql, ": ", Trimmed(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn_))));
  }
  return absl::OkStatus();
}

absl::Status PostgresStore::MigrateLocked() {
  if (absl::Status st = ExecLocked("BEGIN"); !st.ok()) return st;
  auto fail = [&](absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)ExecLocked("ROLLBACK");
    return st;
  };
  // Coordinators starting together: the first migrates, the others wait here
  // and then find nothing left to do.
  auto lock = Query("SELECT pg_advisory_xact_lock($1)").I64(kMigrationLock).Run(this, PGRES_TUPLES_OK, "migration lock");
  if (!lock.ok()) return fail(lock.status());
  if (absl::Status st = ExecLocked("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,"
                                   " applied_us BIGINT NOT NULL)");
      !st.ok()) {
    return fail(st);
  }
  auto cur = Query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Run(this, PGRES_TUPLES_OK, "schema version");
  if (!cur.ok()) return fail(cur.status());
  const int64_t have = Int(cur->get(), 0, 0);
  const auto& migrations = Migrations();
  if (have > static_cast<int64_t>(migrations.size())) {
    return fail(absl::FailedPreconditionError(absl::StrCat("store: the database is at schema version ", have,
                                                           ", newer than this build's ", migrations.size(),
                                                           "; upgrade this coordinator")));
  }
  for (size_t v = static_cast<size_t>(have) + 1; v <= migrations.size(); ++v) {
    for (const char* sql : migrations[v - 1]) {
      if (absl::Status st = ExecLocked(sql); !st.ok()) return fail(st);
    }
    auto rec = Query("INSERT INTO schema_migrations VALUES ($1, $2)")
                   .I64(static_cast<int64_t>(v))
                   .I64(absl::ToUnixMicros(absl::Now()))
                   .Run(this, PGRES_COMMAND_OK, "record migration");
    if (!rec.ok()) return fail(rec.status());
  }
  return ExecLocked("COMMIT");
}

absl::Status PostgresStore::InsertJob(StoredJob& job, std::vector<TaskRecord>& tasks, uint64_t /*next_id*/) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  if (absl::Status st = ExecLocked("BEGIN"); !st.ok()) return st;
  auto fail = [&](absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)ExecLocked("ROLLBACK");
    return st;
  };
  const JobStatus& j = job.status;
  // A concurrent insert of the same request id waits for the other
  // transaction; if that commits, this one inserts nothing.
  auto ins = Query("INSERT INTO jobs VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, 0)"
                   " ON CONFLICT (request_id) WHERE request_id <> '' DO NOTHING")
                 .Str(j.job_id)
                 .Str(j.request_id)
                 .I64(j.priority)
                 .I64(static_cast<int>(j.state))
                 .I64(TimeToUs(j.created))
                 .I64(j.deadline ? TimeToUs(*j.deadline) : kNoTime)
                 .I64(j.finished ? TimeToUs(*j.finished) : kNoTime)
                 .B(job.reuse)
                 .Bin(j.payload)
                 .Run(this, PGRES_COMMAND_OK, "insert job");
  if (!ins.ok()) return fail(ins.status());
  if (std::string(PQcmdTuples(ins->get())) != "1") {
    auto existing = Query("SELECT job_id FROM jobs WHERE request_id = $1").Str(j.request_id).Run(this, PGRES_TUPLES_OK, "request id");
    if (!existing.ok()) return fail(existing.status());
    if (PQntuples(existing->get()) != 1) return fail(absl::UnavailableError("store: request id conflict; retry"));
    return fail(absl::AlreadyExistsError(Text(existing->get(), 0, 0)));
  }
  // Tasks in batches of up to kBatch rows per statement (one prepared
  // statement per batch size in use: kBatch, and 1 for the remainder).
  constexpr size_t kBatch = 64, kCols = 19;
  for (size_t i = 0; i < tasks.size();) {
    const size_t rows = tasks.size() - i >= kBatch ? kBatch : 1;
    std::string sql =
        "INSERT INTO tasks (task_id, job_id, seq, arch, dedup_key, payload, state, attempts, lease_id, lease_worker,"
        " lease_expiry_us, has_result, reused, infra_failed, result, first_result, last_worker, last_finished_us,"
        " priority, rev) VALUES ";
    for (size_t row = 0; row < rows; ++row) {
      absl::StrAppend(&sql, row ? ", (" : "(");
      for (size_t col = 1; col <= kCols; ++col) absl::StrAppend(&sql, "$", row * kCols + col, ", ");
      absl::StrAppend(&sql, "0)");
    }
    Query q(sql);
    for (size_t row = 0; row < rows; ++row, ++i) {
      const TaskRecord& t = tasks[i];
      q.Str(t.task_id).Str(t.job_id).I64(TaskSeq(t.task_id)).Str(t.input.arch).Str(t.input.dedup_key).Bin(t.input.payload);
      q.State(t).I64(j.priority);
    }
    auto r = q.Run(this, PGRES_COMMAND_OK, "insert tasks");
    if (!r.ok()) return fail(r.status());
  }
  // Revisions last: the counter row stays locked only from here to commit.
  const int64_t n = static_cast<int64_t>(tasks.size()) + 1;
  auto top = Query("UPDATE meta SET value = value + $1 WHERE key = 'rev' RETURNING value").I64(n).Run(this, PGRES_TUPLES_OK, "revision");
  if (!top.ok()) return fail(top.status());
  const int64_t rev = Int(top->get(), 0, 0);
  auto stamp_tasks = Query("UPDATE tasks SET rev = $2 + seq WHERE job_id = $1").Str(j.job_id).I64(rev - n + 1).Run(this, PGRES_COMMAND_OK, "stamp tasks");
  if (!stamp_tasks.ok()) return fail(stamp_tasks.status());
  auto stamp_job = Query("UPDATE jobs SET rev = $2, seq = $2 WHERE job_id = $1").Str(j.job_id).I64(rev).Run(this, PGRES_COMMAND_OK, "stamp job");
  if (!stamp_job.ok()) return fail(stamp_job.status());
  if (absl::Status st = ExecLocked("COMMIT"); !st.ok()) return st;
  for (TaskRecord& t : tasks) t.rev = static_cast<uint64_t>(rev - n + 1 + TaskSeq(t.task_id));
  job.status.rev = static_cast<uint64_t>(rev);
  return absl::OkStatus();
}

absl::Status PostgresStore::WriteTaskLocked(TaskRecord& t, bool lease_from_rev) {
  // One statement: lock the row if it is still at t.rev, then take the next
  // revision (the counter after the row, as everywhere), then write.
  auto r = Query("WITH cur AS (SELECT task_id FROM tasks WHERE task_id = $1 AND rev = $2 FOR UPDATE),"
                 " r AS (UPDATE meta SET value = value + 1 WHERE key = 'rev' AND EXISTS (SELECT 1 FROM cur)"
                 " RETURNING value)"
                 " UPDATE tasks SET state = $3, attempts = $4,"
                 " lease_id = CASE WHEN $15 THEN 'lease-r' || (SELECT value FROM r) || $16 ELSE $5 END,"
                 " lease_worker = $6, lease_expiry_us = $7, has_result = $8, reused = $9, infra_failed = $10,"
                 " result = $11, first_result = $12, last_worker = $13, last_finished_us = $14,"
                 " rev = (SELECT value FROM r) WHERE task_id IN (SELECT task_id FROM cur) RETURNING rev, lease_id")
               .Str(t.task_id)
               .I64(static_cast<int64_t>(t.rev))
               .State(t)
               .B(lease_from_rev)
               // The lease's secret ("-<hex>", as LeaseIdAt) after the revision the write takes.
               .Str(lease_from_rev ? t.lease_id.substr(t.lease_id.rfind('-')) : std::string())
               .Run(this, PGRES_TUPLES_OK, "write task");
  if (!r.ok()) return r.status();
  if (PQntuples(r->get()) != 1) {
    return absl::AbortedError(absl::StrCat("store: task ", t.task_id, " changed since revision ", t.rev));
  }
  t.rev = static_cast<uint64_t>(Int(r->get(), 0, 0));
  t.lease_id = Text(r->get(), 0, 1);
  return absl::OkStatus();
}

absl::Status PostgresStore::UpdateTask(TaskRecord& task, uint64_t /*next_id*/) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  return WriteTaskLocked(task, /*lease_from_rev=*/false);  // one statement: its own transaction
}

absl::Status PostgresStore::UpdateJob(JobStatus& j) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  auto r = Query("WITH cur AS (SELECT job_id FROM jobs WHERE job_id = $1 FOR UPDATE),"
                 " r AS (UPDATE meta SET value = value + 1 WHERE key = 'rev' AND EXISTS (SELECT 1 FROM cur)"
                 " RETURNING value)"
                 " UPDATE jobs SET state = $2, finished_us = $3, rev = (SELECT value FROM r)"
                 " WHERE job_id IN (SELECT job_id FROM cur) RETURNING rev")
               .Str(j.job_id)
               .I64(static_cast<int>(j.state))
               .I64(j.finished ? TimeToUs(*j.finished) : kNoTime)
               .Run(this, PGRES_TUPLES_OK, "update job");
  if (!r.ok()) return r.status();
  if (PQntuples(r->get()) != 1) return absl::NotFoundError(absl::StrCat("store: no job '", j.job_id, "'"));
  j.rev = static_cast<uint64_t>(Int(r->get(), 0, 0));
  return absl::OkStatus();
}

absl::Status PostgresStore::ReadRowsLocked(const std::string& where_jobs, const std::string& where_tasks,
                                           uint64_t since, std::vector<StoredJob>* jobs,
                                           std::vector<TaskRecord>* tasks, uint64_t* rev) {
  // One snapshot: revisions commit in order, so it holds every change up to
  // the counter value it reads, and none after.
  if (absl::Status st = ExecLocked("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); !st.ok()) return st;
  auto fail = [&](absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)ExecLocked("ROLLBACK");
    return st;
  };
  auto meta = Query("SELECT value FROM meta WHERE key = 'rev'").Run(this, PGRES_TUPLES_OK, "read revision");
  if (!meta.ok()) return fail(meta.status());
  *rev = static_cast<uint64_t>(Int(meta->get(), 0, 0));
  const std::string jobs_sql = absl::StrCat("SELECT ", kJobColumns, " FROM jobs ", where_jobs);
  auto jr = Query(jobs_sql).I64(static_cast<int64_t>(since)).Run(this, PGRES_TUPLES_OK, "read jobs");
  if (!jr.ok()) return fail(jr.status());
  for (int i = 0; i < PQntuples(jr->get()); ++i) jobs->push_back(ReadJob(jr->get(), i));
  const std::string tasks_sql =
      absl::StrCat("SELECT ", kTaskColumns, " FROM tasks t JOIN jobs j ON t.job_id = j.job_id ", where_tasks);
  auto tr = Query(tasks_sql).I64(static_cast<int64_t>(since)).Run(this, PGRES_TUPLES_OK, "read tasks");
  if (!tr.ok()) return fail(tr.status());
  for (int i = 0; i < PQntuples(tr->get()); ++i) tasks->push_back(ReadTask(tr->get(), i));
  return ExecLocked("COMMIT");
}

absl::StatusOr<StoreSnapshot> PostgresStore::Load() {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  StoreSnapshot snap;
  auto id = Query("SELECT value FROM meta WHERE key = 'next_id'").Run(this, PGRES_TUPLES_OK, "read next id");
  if (!id.ok()) return id.status();
  snap.next_id = static_cast<uint64_t>(Int(id->get(), 0, 0));
  if (absl::Status st = ReadRowsLocked("WHERE $1 >= 0 ORDER BY seq", "WHERE $1 >= 0 ORDER BY j.seq, t.seq", 0,
                                       &snap.jobs, &snap.tasks, &snap.rev);
      !st.ok()) {
    return st;
  }
  return snap;
}

absl::StatusOr<StoreChanges> PostgresStore::ChangesSince(uint64_t rev) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  StoreChanges c;
  if (absl::Status st = ReadRowsLocked("WHERE rev > $1 ORDER BY rev", "WHERE t.rev > $1 ORDER BY t.rev", rev, &c.jobs,
                                       &c.tasks, &c.rev);
      !st.ok()) {
    return st;
  }
  return c;
}

absl::StatusOr<uint64_t> PostgresStore::AllocateId() {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  auto r = Query("UPDATE meta SET value = value + 1 WHERE key = 'next_id' RETURNING value - 1")
               .Run(this, PGRES_TUPLES_OK, "allocate id");
  if (!r.ok()) return r.status();
  return static_cast<uint64_t>(Int(r->get(), 0, 0));
}

absl::StatusOr<std::optional<TaskRecord>> PostgresStore::ClaimTask(const ClaimRequest& req) {
  absl::MutexLock l(&mu_);
  if (req.archs.empty()) return std::optional<TaskRecord>();
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  if (absl::Status st = ExecLocked("BEGIN"); !st.ok()) return st;
  auto fail = [&](absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)ExecLocked("ROLLBACK");
    return st;
  };
  // The best queued task whose row nobody else holds: rows another
  // coordinator is claiming right now are skipped, not waited for. Per arch,
  // the scan walks tasks_claim (arch, priority desc, rev) and stops at the
  // first row that qualifies; first among tasks whose last attempt was not
  // on this worker, then among those (outside the retry grace). A row locked
  // here and not chosen is released at commit.
  const std::string sql = absl::StrCat(
      "SELECT ", kTaskColumns, ", t.priority FROM tasks t",
      " WHERE t.state = 0 AND t.arch = $1 AND (CASE WHEN $4 THEN t.last_worker <> $2",
      " ELSE t.last_worker = $2 AND t.last_finished_us <= $3 END)",
      " AND EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = t.job_id AND j.state IN (0, 1))",
      " ORDER BY t.priority DESC, t.rev LIMIT 1 FOR UPDATE OF t SKIP LOCKED");
  std::optional<TaskRecord> best;
  int64_t best_priority = 0;
  for (bool elsewhere : {true, false}) {
    for (const std::string& arch : req.archs) {
      auto r = Query(sql)
                   .Str(arch)
                   .Str(req.worker_id)
                   .I64(TimeToUs(req.now - req.retry_elsewhere_grace))
                   .B(elsewhere)
                   .Run(this, PGRES_TUPLES_OK, "claim");
      if (!r.ok()) return fail(r.status());
      if (PQntuples(r->get()) == 0) continue;
      TaskRecord t = ReadTask(r->get(), 0);
      const int64_t priority = Int(r->get(), 0, 16);
      if (!best || priority > best_priority || (priority == best_priority && t.rev < best->rev)) {
        best = std::move(t);
        best_priority = priority;
      }
    }
    if (best) break;
  }
  if (!best) {
    (void)ExecLocked("ROLLBACK");
    return std::optional<TaskRecord>();
  }
  TaskRecord leased = LeasedRow(*best, req, best->rev);
  if (absl::Status st = WriteTaskLocked(leased, /*lease_from_rev=*/true); !st.ok()) return fail(st);
  if (absl::Status st = ExecLocked("COMMIT"); !st.ok()) return st;
  return std::optional<TaskRecord>(std::move(leased));
}

absl::Status PostgresStore::PutLibrary(const std::string& name, const std::string& payload) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  return Query("INSERT INTO libraries VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET payload = $2")
      .Str(name)
      .Bin(payload)
      .Run(this, PGRES_COMMAND_OK, "write library")
      .status();
}

absl::Status PostgresStore::DeleteLibrary(const std::string& name) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  return Query("DELETE FROM libraries WHERE name = $1").Str(name).Run(this, PGRES_COMMAND_OK, "delete library").status();
}

absl::StatusOr<std::vector<std::string>> PostgresStore::LoadLibraries() {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  auto r = Query("SELECT payload FROM libraries ORDER BY name").Run(this, PGRES_TUPLES_OK, "read libraries");
  if (!r.ok()) return r.status();
  std::vector<std::string> out;
  for (int i = 0; i < PQntuples(r->get()); ++i) out.push_back(Bytes(r->get(), i, 0));
  return out;
}

absl::Status PostgresStore::PutBlobChunk(const std::string& upload, int64_t index, const std::string& data) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  return Query("INSERT INTO library_blob_chunks VALUES ($1, $2, $3)")
      .Str(upload)
      .I64(index)
      .Bin(data)
      .Run(this, PGRES_COMMAND_OK, "write blob chunk")
      .status();
}

absl::Status PostgresStore::CommitBlob(const std::string& upload, const BlobInfo& info) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  if (absl::Status st = ExecLocked("BEGIN"); !st.ok()) return st;
  auto fail = [&](absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)ExecLocked("ROLLBACK");
    return st;
  };
  // Concurrent commits of one digest are serialized on the digest's row:
  // whoever inserts it first files its chunks, the other drops its own.
  auto ins = Query("INSERT INTO library_blobs VALUES ($1, $2, $3, $4) ON CONFLICT (sha256) DO NOTHING")
                 .Str(info.sha256)
                 .I64(info.format)
                 .I64(info.size)
                 .I64(info.chunks)
                 .Run(this, PGRES_COMMAND_OK, "write blob");
  if (!ins.ok()) return fail(ins.status());
  const bool inserted = std::string(PQcmdTuples(ins->get())) == "1";
  if (!inserted) {
    auto d = Query("DELETE FROM library_blob_chunks WHERE blob_key = $1").Str(upload).Run(this, PGRES_COMMAND_OK,
                                                                                          "drop upload");
    if (!d.ok()) return fail(d.status());
  } else {
    auto rows = Query("SELECT COUNT(*) FROM library_blob_chunks WHERE blob_key = $1")
                    .Str(upload)
                    .Run(this, PGRES_TUPLES_OK, "count upload");
    if (!rows.ok()) return fail(rows.status());
    if (Int(rows->get(), 0, 0) != info.chunks) {
      return fail(absl::FailedPreconditionError(absl::StrCat("store: upload holds ", Int(rows->get(), 0, 0),
                                                             " chunks, the commit names ", info.chunks)));
    }
    for (const char* sql : {"DELETE FROM library_blob_chunks WHERE blob_key = $2 AND $1 <> ''",
                            "UPDATE library_blob_chunks SET blob_key = $2 WHERE blob_key = $1"}) {
      auto r = Query(sql).Str(upload).Str(info.sha256).Run(this, PGRES_COMMAND_OK, "file blob");
      if (!r.ok()) return fail(r.status());
    }
  }
  auto stale = Query("DELETE FROM library_blob_chunks WHERE blob_key LIKE 'upload/%' AND blob_key < $1")
                   .Str(StaleUploadBound(absl::Now()))
                   .Run(this, PGRES_COMMAND_OK, "drop stale uploads");
  if (!stale.ok()) return fail(stale.status());
  return ExecLocked("COMMIT");
}

absl::Status PostgresStore::AbortBlob(const std::string& upload) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  return Query("DELETE FROM library_blob_chunks WHERE blob_key = $1")
      .Str(upload)
      .Run(this, PGRES_COMMAND_OK, "drop upload")
      .status();
}

absl::StatusOr<std::optional<BlobInfo>> PostgresStore::GetBlob(const std::string& sha256) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  auto r = Query("SELECT format, size, chunks FROM library_blobs WHERE sha256 = $1")
               .Str(sha256)
               .Run(this, PGRES_TUPLES_OK, "read blob");
  if (!r.ok()) return r.status();
  if (PQntuples(r->get()) == 0) return std::optional<BlobInfo>();
  return std::optional<BlobInfo>(BlobInfo{sha256, static_cast<int>(Int(r->get(), 0, 0)), Int(r->get(), 0, 1),
                                          Int(r->get(), 0, 2)});
}

absl::StatusOr<std::string> PostgresStore::ReadBlobChunk(const std::string& sha256, int64_t index) {
  absl::MutexLock l(&mu_);
  if (absl::Status st = ConnectedLocked(); !st.ok()) return st;
  auto r = Query("SELECT data FROM library_blob_chunks WHERE blob_key = $1 AND idx = $2")
               .Str(sha256)
               .I64(index)
               .Run(this, PGRES_TUPLES_OK, "read blob chunk");
  if (!r.ok()) return r.status();
  if (PQntuples(r->get()) == 0) {
    return absl::NotFoundError(absl::StrCat("store: blob ", sha256, " has no chunk ", index));
  }
  return Bytes(r->get(), 0, 0);
}

}  // namespace coordinator
}  // namespace mxval
