// The store suite, run against SQLite and against a real PostgreSQL server:
// durability (a coordinator restarted on the same database loses no accepted
// job, lease or result), compare-and-set writes, the change feed, claims, and
// two coordinators sharing one database. A store that fails writes changes
// nothing.
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "service/coordinator/postgres_store.h"
#include "service/coordinator/scheduler.h"
#include "service/coordinator/sqlite_store.h"
#include "tests/pg_server.h"

namespace mxval::coordinator {
namespace {

JobInput Job(int n, const std::string& request_id = "") {
  JobInput j;
  j.request_id = request_id;
  j.reuse_results = true;
  j.payload = "spec-bytes";
  for (int i = 0; i < n; ++i) j.tasks.push_back({"cpu", "key" + std::to_string(i), "payload" + std::to_string(i)});
  return j;
}

enum class Backend { kSqlite, kSqliteShared, kPostgres };

std::string BackendName(const ::testing::TestParamInfo<Backend>& p) {
  switch (p.param) {
    case Backend::kSqlite: return "Sqlite";
    case Backend::kSqliteShared: return "SqliteShared";
    case Backend::kPostgres: return "Postgres";
  }
  return "?";
}

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kPostgres) {
      auto db = testing_util::PgServer::FreshDatabase();
      ASSERT_TRUE(db.ok()) << db.status();
      db_ = *db;
    } else {
      std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
      for (char& c : name) c = c == '/' ? '_' : c;  // parameterized names hold '/'
      db_ = ::testing::TempDir() + "/mxval_store_" + std::to_string(getpid()) + "_" + name + ".db";
      RemoveFiles();
    }
  }
  void TearDown() override {
    sched_.reset();
    store_.reset();
    if (GetParam() != Backend::kPostgres) RemoveFiles();
  }
  void RemoveFiles() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db_ + suffix).c_str());
  }
  // Another connection to the same database (a second coordinator, or this one restarted).
  std::unique_ptr<Store> OpenStore() {
    absl::StatusOr<std::unique_ptr<Store>> s;
    if (GetParam() == Backend::kPostgres) {
      auto p = PostgresStore::Open(db_);
      if (p.ok()) s = std::unique_ptr<Store>(std::move(*p)); else s = p.status();
    } else {
      auto q = SqliteStore::Open(db_, SqliteStoreOptions{GetParam() == Backend::kSqliteShared});
      if (q.ok()) s = std::unique_ptr<Store>(std::move(*q)); else s = q.status();
    }
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::unique_ptr<Scheduler> NewScheduler(Store* store) {
    auto s = Scheduler::Create(&clock_, opt_, store);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // A fresh coordinator process on the same database.
  void Restart() {
    sched_.reset();
    store_.reset();
    store_ = OpenStore();
    ASSERT_NE(store_, nullptr);
    sched_ = NewScheduler(store_.get());
    ASSERT_NE(sched_, nullptr);
  }
  bool shared() const { return GetParam() != Backend::kSqlite; }
  std::string db_;
  FakeClock clock_;
  SchedulerOptions opt_ = [] {
    SchedulerOptions o = MakeSchedulerOptions(absl::Seconds(30), 3, 1000);
    o.is_failed = [](const TaskRecord& t) { return t.result.rfind("fail", 0) == 0; };
    return o;
  }();
  std::unique_ptr<Store> store_;
  std::unique_ptr<Scheduler> sched_;
};

TEST_P(StoreTest, RestartKeepsJobsLeasesAndResults) {
  Restart();
  auto id = sched_->Submit(Job(4, "req-1"));
  ASSERT_TRUE(id.ok());
  auto a = sched_->LeaseTask("w1", {"cpu"});
  auto b = sched_->LeaseTask("w2", {"cpu"});
  auto c = sched_->LeaseTask("w3", {"cpu"});
  ASSERT_TRUE(a && b && c);
  ASSERT_TRUE(sched_->Complete(a->lease_id, "fail-a").ok());
  ASSERT_TRUE(sched_->FailInfra(c->lease_id, "signal 9").ok());

  Restart();  // the coordinator is killed and comes back
  auto job = sched_->GetJob(*id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->tasks_failed, 1);  // recomputed from the stored results
  ASSERT_EQ(sched_->DoneSince(*id, 0)->done.size(), 1u);
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->tasks_total, 4);
  EXPECT_EQ(job->tasks_done, 1);
  EXPECT_EQ(job->tasks_running, 1);
  EXPECT_EQ(job->payload, "spec-bytes");
  auto tasks = sched_->GetTasks(*id);
  EXPECT_EQ(tasks->at(0).result, "fail-a");
  ASSERT_EQ(tasks->at(2).attempts.size(), 1u);
  EXPECT_EQ(tasks->at(2).attempts[0].detail, "signal 9");
  EXPECT_EQ(tasks->at(2).attempts[0].worker_id, "w3");
  // The idempotency key survives: a retried submit returns the same job.
  EXPECT_EQ(*sched_->Submit(Job(4, "req-1")), *id);
  // b's lease survived: its worker renews and reports, once.
  EXPECT_TRUE(sched_->Renew(b->lease_id).ok());
  EXPECT_TRUE(sched_->Complete(b->lease_id, "result-b").ok());
  EXPECT_EQ(sched_->Complete(b->lease_id, "result-b").code(), absl::StatusCode::kFailedPrecondition);
  // The two queued tasks (t2 requeued after its crash, t3) are leasable; ids do not collide.
  auto d = sched_->LeaseTask("w4", {"cpu"});
  auto e = sched_->LeaseTask("w4", {"cpu"});
  ASSERT_TRUE(d && e);
  EXPECT_NE(d->lease_id, a->lease_id);
  EXPECT_NE(d->lease_id, b->lease_id);
  ASSERT_TRUE(sched_->Complete(d->lease_id, "rd").ok());
  ASSERT_TRUE(sched_->Complete(e->lease_id, "re").ok());
  Restart();
  EXPECT_EQ(sched_->GetJob(*id)->state, JobState::kDone);
  EXPECT_EQ(sched_->QueuedTasks(), 0);
  // Stored results are reused by an identical job after the restart.
  auto again = sched_->Submit(Job(1));
  EXPECT_TRUE(sched_->GetTasks(*again)->at(0).reused);
  EXPECT_NE(*again, *id);
}

TEST_P(StoreTest, LeaseExpiresAcrossARestart) {
  Restart();
  auto id = sched_->Submit(Job(1));
  auto a = sched_->LeaseTask("w1", {"cpu"});
  Restart();
  clock_.Advance(absl::Seconds(31));  // the coordinator was down past the lease
  auto b = sched_->LeaseTask("w2", {"cpu"});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->attempt, 2);
  EXPECT_EQ(sched_->Complete(a->lease_id, "late").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(sched_->Complete(b->lease_id, "ok").ok());
  Restart();
  EXPECT_EQ(sched_->GetTasks(*id)->at(0).result, "ok");
}

TEST_P(StoreTest, CancelSurvivesRestart) {
  Restart();
  auto id = sched_->Submit(Job(3));
  auto a = sched_->LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(sched_->Cancel(*id).ok());
  Restart();
  EXPECT_EQ(sched_->GetJob(*id)->state, JobState::kCancelled);
  EXPECT_FALSE(sched_->LeaseTask("w1", {"cpu"}).has_value());
  EXPECT_EQ(sched_->Renew(a->lease_id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sched_->QueuedTasks(), 0);
}

TEST_P(StoreTest, CompareAndSetRefusesAStaleWrite) {
  Restart();
  auto id = sched_->Submit(Job(1));
  ASSERT_TRUE(id.ok()) << id.status();
  const TaskRecord read = sched_->GetTasks(*id)->at(0);
  ASSERT_GT(read.rev, 0u);
  auto other = OpenStore();
  TaskRecord first = read;
  first.result = "written by the other coordinator";
  ASSERT_TRUE(other->UpdateTask(first, 100).ok());
  EXPECT_GT(first.rev, read.rev);
  TaskRecord stale = read;  // still at the revision both read
  stale.result = "lost update";
  EXPECT_EQ(store_->UpdateTask(stale, 100).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(stale.rev, read.rev);
  Restart();
  EXPECT_EQ(sched_->GetTasks(*id)->at(0).result, "written by the other coordinator");
}

TEST_P(StoreTest, ChangesSinceSeesEveryWriteInRevisionOrder) {
  Restart();
  auto start = store_->ChangesSince(0);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_TRUE(start->jobs.empty() && start->tasks.empty());
  auto id = sched_->Submit(Job(3));
  auto c = store_->ChangesSince(start->rev);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->jobs.size(), 1u);
  EXPECT_EQ(c->jobs[0].status.job_id, *id);
  EXPECT_EQ(c->jobs[0].status.payload, "spec-bytes");
  ASSERT_EQ(c->tasks.size(), 3u);
  EXPECT_EQ(c->rev, start->rev + 4);  // one revision per row written
  for (size_t i = 1; i < c->tasks.size(); ++i) EXPECT_LT(c->tasks[i - 1].rev, c->tasks[i].rev);
  auto lease = sched_->LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(lease.has_value());
  auto d = store_->ChangesSince(c->rev);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->jobs.empty());
  ASSERT_EQ(d->tasks.size(), 1u);
  EXPECT_EQ(d->tasks[0].task_id, lease->task_id);
  EXPECT_EQ(d->tasks[0].state, TaskState::kLeased);
  EXPECT_EQ(d->tasks[0].lease_id, lease->lease_id);
  EXPECT_EQ(d->tasks[0].input.payload, lease->payload);
  EXPECT_EQ(d->rev, c->rev + 1);
  EXPECT_TRUE(store_->ChangesSince(d->rev)->tasks.empty());
}

// Two coordinators (each its own connection and scheduler) on one database.
class SharedStoreTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    Restart();
    store_b_ = OpenStore();
    ASSERT_NE(store_b_, nullptr);
    b_ = NewScheduler(store_b_.get());
    ASSERT_NE(b_, nullptr);
  }
  void TearDown() override {
    b_.reset();
    store_b_.reset();
    StoreTest::TearDown();
  }
  std::unique_ptr<Store> store_b_;
  std::unique_ptr<Scheduler> b_;
};

TEST_P(SharedStoreTest, TwoCoordinatorsCompleteAJobWithEveryResultOnce) {
  Scheduler& a = *sched_;
  auto id = a.Submit(Job(6, "req-shared"));
  ASSERT_TRUE(id.ok()) << id.status();
  // The same request through the other coordinator is the same job.
  EXPECT_EQ(*b_->Submit(Job(6, "req-shared")), *id);
  ASSERT_TRUE(b_->Sync().ok());
  EXPECT_EQ(b_->GetJob(*id)->tasks_total, 6);
  std::map<std::string, int> leased;
  std::vector<Lease> held;
  for (int round = 0; round < 10; ++round) {
    for (Scheduler* s : {&a, b_.get()}) {
      auto l = s->LeaseTask(round % 2 ? "w-a" : "w-b", {"cpu"});
      if (!l) continue;
      ++leased[l->task_id];
      held.push_back(*l);
    }
  }
  ASSERT_EQ(leased.size(), 6u);
  for (const auto& [task, n] : leased) EXPECT_EQ(n, 1) << task << " leased twice";
  // Report half through the coordinator that did not grant the lease (a
  // worker that reconnected elsewhere), half through the other.
  for (size_t i = 0; i < held.size(); ++i) {
    Scheduler& s = i % 2 ? a : *b_;
    ASSERT_TRUE(s.Complete(held[i].lease_id, "result-" + held[i].task_id).ok()) << i;
  }
  // A late duplicate report is refused by either.
  EXPECT_EQ(a.Complete(held[0].lease_id, "again").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b_->Complete(held[1].lease_id, "again").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(a.Sync().ok());
  ASSERT_TRUE(b_->Sync().ok());
  for (Scheduler* s : {&a, b_.get()}) {
    auto job = s->GetJob(*id);
    EXPECT_EQ(job->state, JobState::kDone);
    EXPECT_EQ(job->tasks_done, 6);
    EXPECT_EQ(s->DoneSince(*id, 0)->done.size(), 6u);
    auto tasks = s->GetTasks(*id);
    ASSERT_TRUE(tasks.ok());
    for (const TaskRecord& t : *tasks) {
      EXPECT_EQ(t.result, "result-" + t.task_id);
      EXPECT_EQ(t.attempts.size(), 1u);
    }
    EXPECT_EQ(s->QueuedTasks(), 0);
  }
  // And in the database itself.
  Restart();
  auto stored = sched_->GetTasks(*id);
  ASSERT_TRUE(stored.ok());
  for (const TaskRecord& t : *stored) EXPECT_EQ(t.result, "result-" + t.task_id);
}

TEST_P(SharedStoreTest, CancelOnOneCoordinatorReachesTheOther) {
  auto id = sched_->Submit(Job(3));
  ASSERT_TRUE(b_->Sync().ok());
  auto l = b_->LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(l.has_value());
  ASSERT_TRUE(sched_->Cancel(*id).ok());
  ASSERT_TRUE(b_->Sync().ok());
  EXPECT_EQ(b_->GetJob(*id)->state, JobState::kCancelled);
  EXPECT_EQ(b_->Renew(l->lease_id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(b_->LeaseTask("w2", {"cpu"}).has_value());
  EXPECT_EQ(b_->QueuedTasks(), 0);
}

TEST_P(SharedStoreTest, AnExpiredLeaseIsRetriedOnceWhicheverCoordinatorNoticesIt) {
  auto id = sched_->Submit(Job(1));
  auto l = sched_->LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(l.has_value());
  ASSERT_TRUE(b_->Sync().ok());
  EXPECT_EQ(b_->GetJob(*id)->tasks_running, 1);
  clock_.Advance(absl::Seconds(31));
  b_->Tick();  // b expires it; a learns through the store
  sched_->Tick();
  EXPECT_EQ(sched_->Complete(l->lease_id, "late").code(), absl::StatusCode::kFailedPrecondition);
  auto again = sched_->LeaseTask("w2", {"cpu"});
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->attempt, 2);
  ASSERT_TRUE(sched_->Complete(again->lease_id, "ok").ok());
  ASSERT_TRUE(b_->Sync().ok());
  const TaskRecord t = b_->GetTasks(*id)->at(0);
  EXPECT_EQ(t.result, "ok");
  ASSERT_EQ(t.attempts.size(), 2u);
  EXPECT_EQ(t.attempts[0].detail, "lease expired: worker lost or stalled");
  EXPECT_EQ(b_->GetJob(*id)->state, JobState::kDone);
}

TEST_P(SharedStoreTest, ConcurrentCoordinatorsNeverLeaseATaskTwice) {
  constexpr int kTasks = 120, kCoordinators = 4;
  auto id = sched_->Submit(Job(kTasks));
  ASSERT_TRUE(id.ok());
  absl::Mutex mu;
  std::map<std::string, int> leased;
  std::vector<std::thread> threads;
  for (int c = 0; c < kCoordinators; ++c) {
    threads.emplace_back([&, c] {
      auto store = OpenStore();
      auto s = NewScheduler(store.get());
      for (int idle = 0; idle < 3;) {
        auto l = s->LeaseTask("w" + std::to_string(c), {"cpu"});
        if (!l) {
          ++idle;
          (void)s->Sync();
          continue;
        }
        idle = 0;
        {
          absl::MutexLock lock(&mu);
          ++leased[l->task_id];
        }
        EXPECT_TRUE(s->Complete(l->lease_id, "r").ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(leased.size(), static_cast<size_t>(kTasks));
  for (const auto& [task, n] : leased) EXPECT_EQ(n, 1) << task;
  ASSERT_TRUE(sched_->Sync().ok());
  EXPECT_EQ(sched_->GetJob(*id)->tasks_done, kTasks);
  EXPECT_EQ(sched_->GetJob(*id)->state, JobState::kDone);
}

// A file written by the previous release (schema version 3: no revisions)
// opens, migrates, and its queued work runs to completion.
TEST(SqliteStoreMigrationTest, AVersion3FileMigratesAndItsWorkCompletes) {
  const std::string path = ::testing::TempDir() + "/mxval_store_v3_" + std::to_string(getpid()) + ".db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* v3 =
      "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
      "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, request_id TEXT, priority INTEGER, state INTEGER,"
      " created_us INTEGER, deadline_us INTEGER, finished_us INTEGER, reuse INTEGER, seq INTEGER, payload BLOB);"
      "CREATE TABLE tasks (task_id TEXT PRIMARY KEY, job_id TEXT, seq INTEGER, arch TEXT, dedup_key TEXT,"
      " payload BLOB, state INTEGER, attempts TEXT, lease_id TEXT, lease_worker TEXT, lease_expiry_us INTEGER,"
      " has_result INTEGER, reused INTEGER, infra_failed INTEGER, result BLOB, first_result BLOB NOT NULL DEFAULT x'');"
      "CREATE TABLE libraries (name TEXT PRIMARY KEY, payload BLOB NOT NULL);"
      "INSERT INTO meta VALUES ('schema_version', 3), ('next_id', 7);"
      "INSERT INTO jobs VALUES ('job-5', 'req-old', 0, 0, 1000, -9223372036854775808, -9223372036854775808, 1, 0,"
      " x'73706563');"
      "INSERT INTO tasks VALUES ('job-5-t0', 'job-5', 0, 'cpu', 'k0', x'7030', 2, '[]', '', '', -9223372036854775808,"
      " 1, 0, 0, x'6f6c64', x'');"
      "INSERT INTO tasks VALUES ('job-5-t1', 'job-5', 1, 'cpu', 'k1', x'7031', 0, '[]', '', '', -9223372036854775808,"
      " 0, 0, 0, x'', x'');";
  ASSERT_EQ(sqlite3_exec(db, v3, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);
  FakeClock clock;
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto s = Scheduler::Create(&clock, SchedulerOptions{}, store->get());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->GetJob("job-5")->tasks_done, 1);
  EXPECT_EQ(*(*s)->Submit(Job(1, "req-old")), "job-5");  // the idempotency key survived
  auto l = (*s)->LeaseTask("w", {"cpu"});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->task_id, "job-5-t1");
  EXPECT_EQ(l->payload, "p1");
  ASSERT_TRUE((*s)->Complete(l->lease_id, "new").ok());
  EXPECT_EQ((*s)->GetJob("job-5")->state, JobState::kDone);
  auto fresh = (*s)->Submit(Job(1));
  ASSERT_TRUE(fresh.ok());
  // Ids continue from the stored counter; the rest is 128 random bits.
  EXPECT_TRUE(absl::StartsWith(l->lease_id, "lease-7-")) << l->lease_id;
  EXPECT_EQ(l->lease_id.size(), std::string("lease-7-").size() + 2 * kLeaseSecretBytes);
  EXPECT_EQ(*fresh, "job-8");
  s->reset();
  store->reset();
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
}

TEST(PostgresStoreTest, MigrationsRunOnceAndANewerSchemaIsRefused) {
  auto db = testing_util::PgServer::FreshDatabase();
  ASSERT_TRUE(db.ok()) << db.status();
  // Coordinators starting together against an empty database.
  std::vector<std::thread> threads;
  std::atomic<int> opened{0};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      auto s = PostgresStore::Open(*db);
      EXPECT_TRUE(s.ok()) << s.status();
      opened += s.ok();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(opened.load(), 3);
  PGconn* c = PQconnectdb(db->c_str());
  ASSERT_EQ(PQstatus(c), CONNECTION_OK);
  PGresult* r = PQexec(c, "SELECT COUNT(*), MAX(version) FROM schema_migrations");
  ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK);
  EXPECT_EQ(std::string(PQgetvalue(r, 0, 0)), std::to_string(PostgresStore::SchemaVersion()));
  EXPECT_EQ(std::string(PQgetvalue(r, 0, 1)), std::to_string(PostgresStore::SchemaVersion()));
  PQclear(r);
  PQclear(PQexec(c, "INSERT INTO schema_migrations VALUES (99, 0)"));  // a newer release migrated it
  PQfinish(c);
  auto s = PostgresStore::Open(*db);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("schema version 99"), std::string::npos) << s.status();
  // An unreachable server is UNAVAILABLE, and the password is not echoed.
  auto down = PostgresStore::Open("host=127.0.0.1 port=1 user=mxval password=hunter2 connect_timeout=2");
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(down.status().message().find("hunter2"), std::string::npos);
}

// Kernel library content: an upload's rows are invisible until committed,
// survive a restart once committed, and a second upload of the same digest
// (another coordinator, a re-registration) keeps the first and drops its own.
TEST_P(StoreTest, LibraryContentIsStoredByDigestInChunks) {
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  const std::string sha(64, 'a');
  const std::string up = NewUploadKey(absl::Now());
  ASSERT_TRUE(store_->PutBlobChunk(up, 0, std::string(1 << 20, 'x')).ok());
  ASSERT_TRUE(store_->PutBlobChunk(up, 1, std::string("tail\0bytes", 10)).ok());
  EXPECT_FALSE(store_->GetBlob(sha)->has_value());                  // not visible before the commit
  EXPECT_EQ(store_->ReadBlobChunk(sha, 0).status().code(), absl::StatusCode::kNotFound);
  BlobInfo info{sha, 2, (1 << 20) + 10, 2};
  // A commit naming more chunks than were written is refused; nothing filed.
  BlobInfo wrong = info;
  wrong.chunks = 3;
  EXPECT_EQ(store_->CommitBlob(up, wrong).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(store_->GetBlob(sha)->has_value());
  ASSERT_TRUE(store_->CommitBlob(up, info).ok());
  Restart();
  auto got = store_->GetBlob(sha);
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ((*got)->format, 2);
  EXPECT_EQ((*got)->size, (1 << 20) + 10);
  EXPECT_EQ((*got)->chunks, 2);
  EXPECT_EQ(*store_->ReadBlobChunk(sha, 0), std::string(1 << 20, 'x'));
  EXPECT_EQ(*store_->ReadBlobChunk(sha, 1), std::string("tail\0bytes", 10));
  EXPECT_EQ(store_->ReadBlobChunk(sha, 2).status().code(), absl::StatusCode::kNotFound);

  // The same digest uploaded again: the stored rows stay, the new ones go.
  const std::string again = NewUploadKey(absl::Now());
  ASSERT_TRUE(store_->PutBlobChunk(again, 0, "other").ok());
  ASSERT_TRUE(store_->CommitBlob(again, BlobInfo{sha, 2, 5, 1}).ok());
  EXPECT_EQ((*store_->GetBlob(sha))->size, (1 << 20) + 10);
  EXPECT_EQ(*store_->ReadBlobChunk(sha, 1), std::string("tail\0bytes", 10));
  EXPECT_EQ(store_->ReadBlobChunk(again, 0).status().code(), absl::StatusCode::kNotFound);

  // An aborted upload leaves nothing; one left by a dead coordinator a day
  // ago is removed by the next commit.
  const std::string aborted = NewUploadKey(absl::Now());
  ASSERT_TRUE(store_->PutBlobChunk(aborted, 0, "x").ok());
  ASSERT_TRUE(store_->AbortBlob(aborted).ok());
  EXPECT_EQ(store_->ReadBlobChunk(aborted, 0).status().code(), absl::StatusCode::kNotFound);
  const std::string stale = NewUploadKey(absl::Now() - absl::Hours(25));
  const std::string fresh = NewUploadKey(absl::Now());
  ASSERT_TRUE(store_->PutBlobChunk(stale, 0, "x").ok());
  ASSERT_TRUE(store_->PutBlobChunk(fresh, 0, "y").ok());
  const std::string other = NewUploadKey(absl::Now());
  ASSERT_TRUE(store_->PutBlobChunk(other, 0, "z").ok());
  ASSERT_TRUE(store_->CommitBlob(other, BlobInfo{std::string(64, 'b'), 1, 1, 1}).ok());
  EXPECT_EQ(store_->ReadBlobChunk(stale, 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store_->ReadBlobChunk(fresh, 0), "y");  // still uploading
  EXPECT_EQ(*store_->ReadBlobChunk(std::string(64, 'b'), 0), "z");
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest,
                         ::testing::Values(Backend::kSqlite, Backend::kSqliteShared, Backend::kPostgres), BackendName);
INSTANTIATE_TEST_SUITE_P(Backends, SharedStoreTest, ::testing::Values(Backend::kSqliteShared, Backend::kPostgres),
                         BackendName);

// A store whose writes fail: the scheduler must not change.
class FailingStore : public Store {
 public:
  absl::Status InsertJob(StoredJob&, std::vector<TaskRecord>&, uint64_t) override { return Fail(); }
  absl::Status UpdateTask(TaskRecord&, uint64_t) override { return fail_updates ? Fail() : absl::OkStatus(); }
  absl::Status UpdateJob(JobStatus&) override { return Fail(); }
  absl::StatusOr<StoreSnapshot> Load() override { return StoreSnapshot{}; }
  bool fail_updates = true;

 private:
  static absl::Status Fail() { return absl::UnavailableError("disk full"); }
};

TEST(FailingStoreTest, NothingAcceptedWithoutBeingStored) {
  FakeClock clock;
  FailingStore store;
  Scheduler s(&clock, SchedulerOptions{}, &store);
  auto id = s.Submit(Job(2));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.QueuedTasks(), 0);
  EXPECT_FALSE(s.LeaseTask("w", {"cpu"}).has_value());
}

class FlakyStore : public FailingStore {
 public:
  absl::Status InsertJob(StoredJob&, std::vector<TaskRecord>&, uint64_t) override {
    return absl::OkStatus();
  }
};

TEST(FailingStoreTest, ResultNotAcknowledgedUntilStored) {
  FakeClock clock;
  FlakyStore store;
  store.fail_updates = false;
  Scheduler s(&clock, SchedulerOptions{}, &store);
  auto id = s.Submit(Job(1));
  ASSERT_TRUE(id.ok());
  auto l = s.LeaseTask("w", {"cpu"});
  ASSERT_TRUE(l.has_value());
  store.fail_updates = true;  // the disk fills up
  EXPECT_EQ(s.Complete(l->lease_id, "r").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.GetJob(*id)->tasks_done, 0);  // not recorded, lease still held
  store.fail_updates = false;                // the worker retries its report
  EXPECT_TRUE(s.Complete(l->lease_id, "r").ok());
  EXPECT_EQ(s.GetTasks(*id)->at(0).result, "r");
}

}  // namespace
}  // namespace mxval::coordinator
