#include "service/coordinator/scheduler.h"

#include "gtest/gtest.h"

namespace mxval::coordinator {
namespace {

JobInput Job(int n, int priority = 0, const std::string& arch = "cpu", const std::string& key_prefix = "k") {
  JobInput j;
  j.priority = priority;
  for (int i = 0; i < n; ++i) j.tasks.push_back({arch, key_prefix + std::to_string(i), "payload" + std::to_string(i)});
  return j;
}

class SchedulerTest : public ::testing::Test {
 protected:
  FakeClock clock;
  SchedulerOptions opt = MakeSchedulerOptions(absl::Seconds(30), 3, 1000);
  Scheduler s{&clock, opt};
};

TEST_F(SchedulerTest, LeaseCompleteOnce) {
  auto id = s.Submit(Job(2));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(s.GetJob(*id)->state, JobState::kQueued);
  auto l1 = s.LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(l1.has_value());
  EXPECT_EQ(l1->payload, "payload0");
  EXPECT_EQ(l1->attempt, 1);
  EXPECT_EQ(s.GetJob(*id)->state, JobState::kRunning);
  EXPECT_TRUE(s.Complete(l1->lease_id, "r0").ok());
  // A second report for the same lease is not recorded again.
  EXPECT_EQ(s.Complete(l1->lease_id, "again").code(), absl::StatusCode::kFailedPrecondition);
  auto l2 = s.LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(l2.has_value());
  EXPECT_TRUE(s.Complete(l2->lease_id, "r1").ok());
  EXPECT_FALSE(s.LeaseTask("w1", {"cpu"}).has_value());
  auto job = s.GetJob(*id);
  EXPECT_EQ(job->state, JobState::kDone);
  EXPECT_EQ(job->tasks_done, 2);
  auto tasks = s.GetTasks(*id);
  EXPECT_EQ(tasks->at(0).result, "r0");
  EXPECT_EQ(s.QueuedTasks(), 0);
}

TEST_F(SchedulerTest, DoneSinceReturnsOnlyNewCompletionsAndCountsFailures) {
  SchedulerOptions o = opt;
  o.is_failed = [](const TaskRecord& t) { return t.result == "bad"; };
  Scheduler sched(&clock, o);
  auto id = sched.Submit(Job(3));
  ASSERT_TRUE(id.ok());
  auto d0 = sched.DoneSince(*id, 0);
  ASSERT_TRUE(d0.ok());
  EXPECT_TRUE(d0->done.empty());
  EXPECT_EQ(d0->cursor, 0u);
  const uint64_t v0 = sched.version();
  auto a = sched.LeaseTask("w", {"cpu"});
  auto b = sched.LeaseTask("w", {"cpu"});
  ASSERT_TRUE(a && b);
  EXPECT_GT(sched.version(), v0);
  // A change already happened: no waiting.
  EXPECT_EQ(sched.AwaitChange(v0, absl::Hours(1)), sched.version());
  ASSERT_TRUE(sched.Complete(b->lease_id, "bad").ok());
  auto d1 = sched.DoneSince(*id, d0->cursor);
  ASSERT_EQ(d1->done.size(), 1u);
  EXPECT_EQ(d1->done[0].task_id, b->task_id);
  EXPECT_EQ(d1->status.tasks_failed, 1);
  ASSERT_TRUE(sched.Complete(a->lease_id, "good").ok());
  auto d2 = sched.DoneSince(*id, d1->cursor);
  ASSERT_EQ(d2->done.size(), 1u);
  EXPECT_EQ(d2->done[0].task_id, a->task_id);
  EXPECT_EQ(d2->status.tasks_failed, 1);
  EXPECT_EQ(d2->cursor, 2u);
  EXPECT_TRUE(sched.DoneSince(*id, d2->cursor)->done.empty());
  EXPECT_EQ(sched.DoneSince("job-404", 0).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, StatsCountQueueAndAge) {
  ASSERT_TRUE(s.Submit(Job(3)).ok());
  clock.Advance(absl::Seconds(7));
  auto st = s.Stats();
  EXPECT_EQ(st.tasks_queued, 3);
  EXPECT_EQ(st.jobs_queued, 1);
  EXPECT_EQ(st.oldest_queued_age, absl::Seconds(7));
  auto l = s.LeaseTask("w", {"cpu"});
  st = s.Stats();
  EXPECT_EQ(st.tasks_queued, 2);
  EXPECT_EQ(st.tasks_leased, 1);
  EXPECT_EQ(st.jobs_running, 1);
}

TEST_F(SchedulerTest, ArchMatching) {
  ASSERT_TRUE(s.Submit(Job(1, 0, "sm_90a")).ok());
  EXPECT_FALSE(s.LeaseTask("cpu-worker", {"cpu"}).has_value());
  EXPECT_TRUE(s.LeaseTask("gpu-worker", {"sm_90a", "cpu"}).has_value());
}

TEST_F(SchedulerTest, ExpiredLeaseRequeuesOnAnotherWorkerAndLateReportIsRejected) {
  auto id = s.Submit(Job(1));
  auto l1 = s.LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(l1.has_value());
  clock.Advance(absl::Seconds(20));
  EXPECT_TRUE(s.Renew(l1->lease_id).ok());  // heartbeat extends to t=50
  clock.Advance(absl::Seconds(25));
  EXPECT_FALSE(s.LeaseTask("w2", {"cpu"}).has_value());  // still held at t=45
  clock.Advance(absl::Seconds(10));                       // t=55: expired
  auto l2 = s.LeaseTask("w2", {"cpu"});
  ASSERT_TRUE(l2.has_value());
  EXPECT_EQ(l2->attempt, 2);
  // The presumed-dead worker reports late: not recorded.
  EXPECT_EQ(s.Complete(l1->lease_id, "late").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Renew(l1->lease_id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Stats().lease_expiries_total, 1);
  EXPECT_EQ(s.Stats().retries_total, 1);
  EXPECT_EQ(s.Stats().tasks_leased, 1);
  EXPECT_TRUE(s.Complete(l2->lease_id, "good").ok());
  auto t = s.GetTasks(*id)->at(0);
  EXPECT_EQ(t.result, "good");
  ASSERT_EQ(t.attempts.size(), 2u);
  EXPECT_EQ(t.attempts[0].worker_id, "w1");
  EXPECT_TRUE(t.attempts[0].infra_failure);
  EXPECT_NE(t.attempts[0].detail.find("lease expired"), std::string::npos);
  EXPECT_EQ(t.attempts[1].worker_id, "w2");
  EXPECT_FALSE(t.attempts[1].infra_failure);
}

TEST_F(SchedulerTest, InfraFailuresRetryElsewhereThenGiveUp) {
  auto id = s.Submit(Job(1));
  auto a = s.LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(s.FailInfra(a->lease_id, "child killed by signal 11").ok());
  // w1 asks again at once: it is not handed the task it just crashed on.
  EXPECT_FALSE(s.LeaseTask("w1", {"cpu"}).has_value());
  auto b = s.LeaseTask("w2", {"cpu"});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->attempt, 2);
  ASSERT_TRUE(s.FailInfra(b->lease_id, "exit 137 (OOM)").ok());
  // Both workers failed it recently: neither is offered it within the grace.
  EXPECT_FALSE(s.LeaseTask("w1", {"cpu"}).has_value());
  EXPECT_FALSE(s.LeaseTask("w2", {"cpu"}).has_value());
  clock.Advance(absl::Seconds(6));
  auto c = s.LeaseTask("w1", {"cpu"});  // after the grace: retried even on w1
  ASSERT_TRUE(c.has_value());
  ASSERT_TRUE(s.FailInfra(c->lease_id, "timeout").ok());
  EXPECT_FALSE(s.LeaseTask("w3", {"cpu"}).has_value());  // max_attempts = 3 reached
  auto t = s.GetTasks(*id)->at(0);
  EXPECT_EQ(t.state, TaskState::kDone);
  EXPECT_TRUE(t.infra_failed);
  EXPECT_FALSE(t.has_result);
  ASSERT_EQ(t.attempts.size(), 3u);
  EXPECT_EQ(t.attempts[1].detail, "exit 137 (OOM)");
  EXPECT_EQ(s.GetJob(*id)->state, JobState::kDone);
}

TEST_F(SchedulerTest, PrefersAWorkerThatHasNotFailedTheTask) {
  ASSERT_TRUE(s.Submit(Job(2)).ok());
  auto a = s.LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(s.FailInfra(a->lease_id, "crash").ok());  // t0 back in the queue, ahead of t1
  auto b = s.LeaseTask("w1", {"cpu"});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->payload, "payload1");  // w1 skips the task it crashed on
  auto c = s.LeaseTask("w2", {"cpu"});
  EXPECT_EQ(c->payload, "payload0");
}

TEST_F(SchedulerTest, PrioritiesThenFifo) {
  ASSERT_TRUE(s.Submit(Job(2, 1, "cpu", "low")).ok());
  ASSERT_TRUE(s.Submit(Job(1, 50, "cpu", "high")).ok());
  ASSERT_TRUE(s.Submit(Job(1, 1, "cpu", "low2")).ok());
  std::vector<std::string> order;
  while (auto l = s.LeaseTask("w", {"cpu"})) order.push_back(l->task_id);
  EXPECT_EQ(order, (std::vector<std::string>{"job-2-t0", "job-1-t0", "job-1-t1", "job-3-t0"}));
}

TEST_F(SchedulerTest, IdempotentSubmitAndQueueLimit) {
  JobInput j = Job(3);
  j.request_id = "ci-run-42";
  auto a = s.Submit(j), b = s.Submit(j);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(s.QueuedTasks(), 3);
  auto big = s.Submit(Job(998));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.QueuedTasks(), 3);  // nothing of the rejected job stored
  EXPECT_EQ(s.Submit(JobInput{}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, DedupReusesStoredResults) {
  auto first = s.Submit(Job(2));
  while (auto l = s.LeaseTask("w", {"cpu"})) ASSERT_TRUE(s.Complete(l->lease_id, "res-" + l->payload).ok());
  JobInput again = Job(3);  // keys k0, k1 done before; k2 new
  again.reuse_results = true;
  auto second = s.Submit(again);
  ASSERT_TRUE(second.ok());
  auto tasks = s.GetTasks(*second);
  EXPECT_TRUE(tasks->at(0).reused);
  EXPECT_EQ(tasks->at(0).result, "res-payload0");
  EXPECT_EQ(tasks->at(1).state, TaskState::kDone);
  EXPECT_EQ(tasks->at(2).state, TaskState::kQueued);
  EXPECT_EQ(s.GetJob(*second)->tasks_done, 2);
  JobInput no_reuse = Job(1);
  EXPECT_EQ(s.GetTasks(*s.Submit(no_reuse))->at(0).state, TaskState::kQueued);
}

TEST_F(SchedulerTest, CancelStopsQueuedAndLeasedTasks) {
  auto id = s.Submit(Job(3));
  auto l = s.LeaseTask("w", {"cpu"});
  ASSERT_TRUE(s.Cancel(*id).ok());
  EXPECT_EQ(s.GetJob(*id)->state, JobState::kCancelled);
  EXPECT_FALSE(s.LeaseTask("w", {"cpu"}).has_value());
  EXPECT_EQ(s.Renew(l->lease_id).code(), absl::StatusCode::kFailedPrecondition);  // worker stops it
  EXPECT_EQ(s.Complete(l->lease_id, "x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.QueuedTasks(), 0);
  EXPECT_EQ(s.Cancel("job-99").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(s.Cancel(*id).ok());  // idempotent
}

TEST_F(SchedulerTest, DeadlineExpiresUnfinishedJobs) {
  JobInput j = Job(2);
  j.deadline = absl::Minutes(5);
  auto id = s.Submit(j);
  auto l = s.LeaseTask("w", {"cpu"});
  ASSERT_TRUE(s.Complete(l->lease_id, "r").ok());
  clock.Advance(absl::Minutes(6));
  s.Tick();
  auto job = s.GetJob(*id);
  EXPECT_EQ(job->state, JobState::kExpired);
  EXPECT_EQ(job->tasks_done, 1);
  EXPECT_FALSE(s.LeaseTask("w", {"cpu"}).has_value());
  EXPECT_EQ(s.QueuedTasks(), 0);
}

}  // namespace
}  // namespace mxval::coordinator
