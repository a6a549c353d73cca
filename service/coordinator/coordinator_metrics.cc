#include "service/coordinator/coordinator_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace mxval {
namespace coordinator {

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& r)
    : jobs_submitted_(prometheus::BuildCounter()
                          .Name("mxval_coordinator_jobs_submitted_total")
                          .Help("Jobs accepted by SubmitJob (idempotent retries not counted).")
                          .Register(r)
                          .Add({})),
      jobs_rejected_(prometheus::BuildCounter()
                         .Name("mxval_coordinator_jobs_rejected_total")
                         .Help("SubmitJob calls refused, by reason (invalid, exhausted, unavailable, client_limit).")
                         .Register(r)),
      tasks_reported_(prometheus::BuildCounter()
                          .Name("mxval_coordinator_tasks_reported_total")
                          .Help("Task reports by outcome: pass, fail, infra, lost.")
                          .Register(r)),
      task_run_seconds_(prometheus::BuildHistogram()
                            .Name("mxval_coordinator_task_run_seconds")
                            .Help("Time from lease to report of a task attempt.")
                            .Register(r)
                            .Add({}, prometheus::Histogram::BucketBoundaries{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
                                                                             300})),
      jobs_(prometheus::BuildGauge().Name("mxval_coordinator_jobs").Help("Jobs by state.").Register(r)),
      tasks_(prometheus::BuildGauge().Name("mxval_coordinator_tasks").Help("Unfinished tasks by state (queued, leased).").Register(r)),
      queue_oldest_age_(prometheus::BuildGauge()
                            .Name("mxval_coordinator_queue_oldest_age_seconds")
                            .Help("Age of the oldest queued task (0 when the queue is empty).")
                            .Register(r)
                            .Add({})),
      lease_expiries_(prometheus::BuildCounter()
                          .Name("mxval_coordinator_lease_expiries_total")
                          .Help("Leases that expired: the worker was lost or stalled.")
                          .Register(r)
                          .Add({})),
      retries_(prometheus::BuildCounter()
                   .Name("mxval_coordinator_task_retries_total")
                   .Help("Task attempts re-queued after an infrastructure failure or lease expiry.")
                   .Register(r)
                   .Add({})),
      workers_(prometheus::BuildGauge().Name("mxval_coordinator_workers").Help("Registered workers by arch and state.").Register(r)),
      triage_(prometheus::BuildCounter()
                  .Name("mxval_coordinator_triage_decisions_total")
                  .Help("Final triage of finished tasks and triaged CI logs, by class and signature kind.")
                  .Register(r)),
      reruns_(prometheus::BuildCounter()
                  .Name("mxval_coordinator_triage_reruns_total")
                  .Help("Failing tasks re-run on the same inputs to verify them.")
                  .Register(r)
                  .Add({})),
      triage_changed_(prometheus::BuildCounter()
                          .Name("mxval_coordinator_triage_changed_total")
                          .Help("Tasks whose triage class after the verification re-run differs from the first run's.")
                          .Register(r)),
      auth_denied_(prometheus::BuildCounter()
                       .Name("mxval_coordinator_auth_denied_total")
                       .Help("Calls refused by authentication or authorization, by reason.")
                       .Register(r)),
      calls_limited_(prometheus::BuildCounter()
                         .Name("mxval_coordinator_calls_limited_total")
                         .Help("Client calls refused by the per-client call rate, by method.")
                         .Register(r)),
      store_errors_(prometheus::BuildCounter()
                        .Name("mxval_coordinator_store_errors_total")
                        .Help("Store reads and writes that failed (full disk, lost database connection).")
                        .Register(r)
                        .Add({})) {}

void CoordinatorMetrics::TaskReported(const std::string& outcome, double run_seconds) {
  tasks_reported_.Add({{"outcome", outcome}}).Increment();
  if (run_seconds >= 0) task_run_seconds_.Observe(run_seconds);
}

void CoordinatorMetrics::Refresh(const SchedulerStats& s, const std::map<std::pair<std::string, std::string>, int>& w) {
  jobs_.Add({{"state", "queued"}}).Set(static_cast<double>(s.jobs_queued));
  jobs_.Add({{"state", "running"}}).Set(static_cast<double>(s.jobs_running));
  jobs_.Add({{"state", "done"}}).Set(static_cast<double>(s.jobs_done));
  jobs_.Add({{"state", "cancelled"}}).Set(static_cast<double>(s.jobs_cancelled));
  jobs_.Add({{"state", "expired"}}).Set(static_cast<double>(s.jobs_expired));
  tasks_.Add({{"state", "queued"}}).Set(static_cast<double>(s.tasks_queued));
  tasks_.Add({{"state", "leased"}}).Set(static_cast<double>(s.tasks_leased));
  queue_oldest_age_.Set(absl::ToDoubleSeconds(s.oldest_queued_age));
  // Counters mirror the scheduler's monotonic totals.
  if (s.lease_expiries_total > last_expiries_) lease_expiries_.Increment(s.lease_expiries_total - last_expiries_);
  if (s.retries_total > last_retries_) retries_.Increment(s.retries_total - last_retries_);
  last_expiries_ = static_cast<double>(s.lease_expiries_total);
  last_retries_ = static_cast<double>(s.retries_total);
  // Every (arch, state) seen so far is reported, 0 when empty now: a pool
  // whose workers all left must read 0 active, not its last count.
  for (const auto& [key, n] : w) seen_workers_.insert(key);
  for (const auto& key : seen_workers_) {
    auto it = w.find(key);
    workers_.Add({{"arch", key.first}, {"state", key.second}}).Set(it == w.end() ? 0 : it->second);
  }
}

StoreErrorReporter::StoreErrorReporter(const Clock* clock, std::function<void(const std::string&)> log,
                                       absl::Duration every)
    : clock_(clock), log_(std::move(log)), every_(every) {}

void StoreErrorReporter::Report(const absl::Status& st) {
  if (CoordinatorMetrics* m = metrics_.load()) m->StoreError();
  std::string line;
  {
    absl::MutexLock l(&mu_);
    const absl::Time now = clock_->Now();
    if (now - last_ < every_) {
      ++unlogged_;
      return;
    }
    line = absl::StrCat("store error: ", st.message());
    if (unlogged_ > 0) absl::StrAppend(&line, " (and ", unlogged_, " more since the last one logged)");
    last_ = now;
    unlogged_ = 0;
  }
  if (log_) log_(line);
}

}  // namespace coordinator
}  // namespace mxval
