// Durability: a coordinator restarted on the same SQLite file loses no
// accepted job, lease or result; a store that fails writes changes nothing.
#include "service/coordinator/sqlite_store.h"

#include <unistd.h>
#include <cstdio>

#include "gtest/gtest.h"
#include "service/coordinator/scheduler.h"

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

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/mxval_store_" + std::to_string(getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::remove(path_.c_str());
  }
  void TearDown() override {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
  }
  // A fresh coordinator process on the same file.
  void Restart() {
    sched_.reset();
    store_.reset();
    auto st = SqliteStore::Open(path_);
    ASSERT_TRUE(st.ok()) << st.status();
    store_ = std::move(*st);
    auto s = Scheduler::Create(&clock_, opt_, store_.get());
    ASSERT_TRUE(s.ok()) << s.status();
    sched_ = std::move(*s);
  }
  std::string path_;
  FakeClock clock_;
  SchedulerOptions opt_ = [] {
    SchedulerOptions o = MakeSchedulerOptions(absl::Seconds(30), 3, 1000);
    o.is_failed = [](const TaskRecord& t) { return t.result.rfind("fail", 0) == 0; };
    return o;
  }();
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Scheduler> sched_;
};

TEST_F(SqliteStoreTest, RestartKeepsJobsLeasesAndResults) {
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

TEST_F(SqliteStoreTest, LeaseExpiresAcrossARestart) {
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

TEST_F(SqliteStoreTest, CancelSurvivesRestart) {
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

// A store whose writes fail: the scheduler must not change.
class FailingStore : public Store {
 public:
  absl::Status InsertJob(const StoredJob&, const std::vector<TaskRecord>&, uint64_t) override { return Fail(); }
  absl::Status UpdateTask(const TaskRecord&, uint64_t) override { return fail_updates ? Fail() : absl::OkStatus(); }
  absl::Status UpdateJob(const JobStatus&) override { return Fail(); }
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
  absl::Status InsertJob(const StoredJob&, const std::vector<TaskRecord>&, uint64_t) override {
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
