// The coordinator's Prometheus metrics (names: mxval_coordinator_*). Labels
// take bounded values only: outcomes, states, archs, job states.
#ifndef MXVAL_SERVICE_COORDINATOR_COORDINATOR_METRICS_H_
#define MXVAL_SERVICE_COORDINATOR_COORDINATOR_METRICS_H_

#include <map>
#include <string>
#include <utility>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
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
  double last_expiries_ = 0, last_retries_ = 0;
};

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_COORDINATOR_METRICS_H_
