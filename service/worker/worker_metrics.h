// A worker's Prometheus metrics (names: mxval_worker_*). Label values are
// bounded: kernel names from the loaded libraries, sides, M buckets, outcomes.
#ifndef MXVAL_SERVICE_WORKER_WORKER_METRICS_H_
#define MXVAL_SERVICE_WORKER_WORKER_METRICS_H_

#include <string>

#include "mxval/v1/mxval.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace mxval {
namespace worker {

// "1", "2-16", "17-64", "65-256", "257-1024", "1025-4096", "4097+".
std::string MBucket(int64_t m);

class WorkerMetrics {
 public:
  explicit WorkerMetrics(prometheus::Registry& registry);
  // A finished task: kernel times and accuracy of both sides.
  void TaskResult(const v1::TaskResult& r);
  // outcome: "pass", "fail", "infra".
  void TaskOutcome(const std::string& outcome) { tasks_.Add({{"outcome", outcome}}).Increment(); }
  void ChildCrash() { child_crashes_.Increment(); }
  // A task whose lease the coordinator took away, result not reported:
  // reason "lost" (a heartbeat named the lease lost: cancelled or expired;
  // its child was stopped) or "not_accepted" (ReportResult refused it).
  void TaskAbandoned(const std::string& reason) { abandoned_.Add({{"reason", reason}}).Increment(); }
  // 1 while the coordinator has this worker drained (`mxval drain`).
  void Drained(bool drained) { drained_.Set(drained ? 1 : 0); }
  void DeviceHealth(int index, const std::string& arch, bool healthy);

 private:
  prometheus::Family<prometheus::Histogram>& kernel_seconds_;
  prometheus::Family<prometheus::Gauge>& tflops_;
  prometheus::Family<prometheus::Gauge>& rel_err_;
  prometheus::Family<prometheus::Counter>& tasks_;
  prometheus::Counter& child_crashes_;
  prometheus::Family<prometheus::Counter>& abandoned_;
  prometheus::Gauge& drained_;
  prometheus::Family<prometheus::Counter>& runs_;
  prometheus::Family<prometheus::Gauge>& device_healthy_;
  prometheus::Family<prometheus::Counter>& timing_windows_;
  prometheus::Family<prometheus::Histogram>& timing_clock_;
  prometheus::Family<prometheus::Gauge>& roofline_fraction_;
  prometheus::Family<prometheus::Gauge>& device_copy_bw_;
  prometheus::Family<prometheus::Gauge>& device_bf16_rate_;
};

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_WORKER_METRICS_H_
