// The coordinator's Prometheus metrics (names: mxval_coordinator_*). Labels
// take bounded values only: outcomes, states, archs, job states.
#ifndef MXVAL_SERVICE_COORDINATOR_COORDINATOR_METRICS_H_
#define MXVAL_SERVICE_COORDINATOR_COORDINATOR_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "prometheus/registry.h"
#include "service/coordinator/scheduler.h"

namespace mxval {
namespace coordinator {

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  void JobSubmitted() { jobs_submitted_.Increment(); }
  void JobRejected(const std::string& reason) { jobs_rejected_.Add({{"reason", reason}}).Increment(); }
  // outcome: "pass", "fail" (a verdict other than pass), "infra", "lost" (late report).
  void TaskReported(const std::string& outcome, double run_seconds);
  // A task's final triage: class (PR_TOUCHED, ...) and signature kind, a
  // bounded label ("candidate FAIL_MISMATCH", "infra", a log rule name).
  void TriageDecision(const std::string& triage_class, const std::string& signature) {
    triage_.Add({{"class", triage_class}, {"signature", signature}}).Increment();
  }
  void VerifyRerun() { reruns_.Increment(); }
  // A client call refused by the per-client call rate (method: a fixed RPC name).
  void CallLimited(const std::string& method) { calls_limited_.Add({{"method", method}}).Increment(); }
  // A call refused by authentication or authorization (bounded reasons).
  void AuthDenied(const std::string& reason) { auth_denied_.Add({{"reason", reason}}).Increment(); }
  // A store read or write that failed (full disk, lost database).
  void StoreError() { store_errors_.Increment(); }
  // The class after the verification re-run differs from the first run's.
  void TriageChanged(const std::string& from, const std::string& to) {
    triage_changed_.Add({{"from", from}, {"to", to}}).Increment();
  }
  // Gauges from a snapshot; workers counted by (arch, state).
  void Refresh(const SchedulerStats& s, const std::map<std::pair<std::string, std::string>, int>& workers);

 private:
  prometheus::Counter& jobs_submitted_;
  prometheus::Family<prometheus::Counter>& jobs_rejected_;
  prometheus::Family<prometheus::Counter>& tasks_reported_;
  prometheus::Histogram& task_run_seconds_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& tasks_;
  prometheus::Gauge& queue_oldest_age_;
  prometheus::Counter& lease_expiries_;
  prometheus::Counter& retries_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Counter>& triage_;
  prometheus::Counter& reruns_;
  prometheus::Family<prometheus::Counter>& triage_changed_;
  prometheus::Family<prometheus::Counter>& auth_denied_;
  prometheus::Family<prometheus::Counter>& calls_limited_;
  double last_expiries_ = 0, last_retries_ = 0;
  std::set<std::pair<std::string, std::string>> seen_workers_;
  prometheus::Counter& store_errors_;
};

// Store errors (SchedulerOptions::on_store_error): each counted, and logged
// at most once per `every` with the number not logged since, so a full disk
// is visible in the log without flooding it. Thread-safe.
class StoreErrorReporter {
 public:
  StoreErrorReporter(const Clock* clock, std::function<void(const std::string&)> log,
                     absl::Duration every = absl::Seconds(10));
  // Counts from now on (metrics may come after the store and scheduler).
  void set_metrics(CoordinatorMetrics* m) { metrics_ = m; }
  void Report(const absl::Status& st);

 private:
  const Clock* clock_;
  const std::function<void(const std::string&)> log_;
  const absl::Duration every_;
  std::atomic<CoordinatorMetrics*> metrics_{nullptr};
  absl::Mutex mu_;
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t unlogged_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_COORDINATOR_METRICS_H_
