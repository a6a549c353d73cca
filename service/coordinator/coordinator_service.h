// gRPC glue for the coordinator: ValidationService, WorkerService and
// AdminService mapped onto the job planner and the scheduler.
//
// Every RPC validates its request (INVALID_ARGUMENT names the field), maps
// absl::Status codes to gRPC codes one to one, and never blocks longer than
// the client's deadline (long polls are capped by max_long_poll).
#ifndef MXVAL_SERVICE_COORDINATOR_COORDINATOR_SERVICE_H_
#define MXVAL_SERVICE_COORDINATOR_COORDINATOR_SERVICE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/token_bucket.h"
#include "grpcpp/grpcpp.h"
#include "mxval/v1/mxval.grpc.pb.h"
#include "service/auth/auth.h"
#include "service/coordinator/coordinator_metrics.h"
#include "service/triage/log_classifier.h"
#include "service/triage/log_triage.h"
#include "service/triage/ownership.h"
#include "service/coordinator/job_planner.h"
#include "service/coordinator/library_content.h"
#include "service/coordinator/library_registry.h"
#include "service/coordinator/scheduler.h"

namespace mxval {
namespace coordinator {

struct CoordinatorOptions {
  absl::Duration heartbeat_interval = absl::Seconds(5);
  absl::Duration lease_duration = absl::Seconds(30);  // reported to workers; the scheduler enforces its own
  absl::Duration max_long_poll = absl::Seconds(10);
  // Long polls and watches wake on scheduler changes; these cap one wait
  // (to re-check time-based eligibility and cancelled clients).
  absl::Duration poll_step = absl::Milliseconds(250);
  absl::Duration watch_step = absl::Seconds(1);
  int max_message_bytes = 16 << 20;
  // A ListJobs page ends before it grows past this, so every page fits in
  // the messages clients accept (a job's spec may carry a dispatch table).
  size_t max_list_page_bytes = 4 << 20;
  PlannerOptions planner = PlannerOptions::WithBuiltinTables();
  CoordinatorMetrics* metrics = nullptr;  // optional
  // Triage configuration; null: the built-in rules and ownership map.
  const triage::LogClassifier* log_rules = nullptr;
  const triage::Ownership* ownership = nullptr;
  triage::LogTriageOptions log_triage;
  // Null: every call is allowed (plaintext loopback, tests). Otherwise
  // clients need tokens with roles and workers client certificates.
  const auth::Authorizer* authorizer = nullptr;
  // Per-client submit limits (client = the authenticated principal, or
  // "anonymous"); 0 = unlimited. Refusals are RESOURCE_EXHAUSTED with the
  // wait in the message and in the `retry-after-ms` trailer. Idempotent
  // retries (a known request_id) are never refused.
  int max_inflight_jobs_per_client = 0;  // jobs queued or running
  double submit_rate_per_minute = 0;     // token bucket, burst = max(1, rate / 6)
  // Per-client limit on every other client call (reads, watches, cancels,
  // triage, admin), token bucket with burst = max(10, 2 * rate); 0 =
  // unlimited. Worker calls are not limited (workers are few, known by
  // certificate, and lease at the rate they finish work).
  double rpc_rate_per_second = 0;
  // Registered external kernel libraries; null: an in-memory registry owned
  // by the coordinator (tests, embedded runs without a store).
  LibraryRegistry* libraries = nullptr;
  // Their uploaded content (UploadKernelLibrary, FetchKernelLibrary); null:
  // kept in memory by the coordinator, up to 256 MiB per library.
  LibraryContent* library_content = nullptr;
  // One line per refused worker call (an unregistered worker or device, a
  // lease held by another worker, a result for another task), without
  // secrets; each is also counted in mxval_coordinator_auth_denied_total.
  // Null: not logged.
  std::function<void(const std::string&)> log;
};

// A registry of at most this many workers (gone ones make room).
inline constexpr size_t kMaxWorkers = 4096;
// Request ids are per owner: the scheduler keys them as
// "<principal><separator><request id>" (principals never contain it).
inline constexpr char kRequestKeySeparator = '\x1f';
std::string RequestKey(const std::string& principal, const std::string& request_id);
// The client's request id of a scheduler key.
std::string ClientRequestId(const std::string& key);

grpc::Status ToGrpc(const absl::Status& s);

// A DONE task is failed when every attempt failed on infrastructure or a side
// is not VERDICT_PASS. Set as SchedulerOptions::is_failed so the scheduler
// keeps per-job failure counts.
bool TaskFailed(const TaskRecord& t);
SchedulerOptions WithFailurePredicate(SchedulerOptions o);

// The three services over one scheduler. Thread-safe.
class Coordinator final : public v1::ValidationService::Service,
                          public v1::WorkerService::Service,
                          public v1::AdminService::Service,
                          public v1::TriageService::Service {
 public:
  Coordinator(const Clock* clock, Scheduler* scheduler, CoordinatorOptions options);

  // ValidationService
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*, grpc::ServerWriter<v1::JobEvent>*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::CancelJobResponse*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  // WorkerService
  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest*, v1::RegisterWorkerResponse*) override;
  grpc::Status LeaseTask(grpc::ServerContext*, const v1::LeaseTaskRequest*, v1::LeaseTaskResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override;
  grpc::Status ReportResult(grpc::ServerContext*, const v1::ReportResultRequest*, v1::ReportResultResponse*) override;
  grpc::Status FetchKernelLibrary(grpc::ServerContext*, const v1::FetchKernelLibraryRequest*,
                                  grpc::ServerWriter<v1::FetchKernelLibraryResponse>*) override;
  // AdminService
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*, v1::ListWorkersResponse*) override;
  grpc::Status DrainWorker(grpc::ServerContext*, const v1::DrainWorkerRequest*, v1::DrainWorkerResponse*) override;
  grpc::Status RegisterKernelLibrary(grpc::ServerContext*, const v1::RegisterKernelLibraryRequest*,
                                     v1::RegisterKernelLibraryResponse*) override;
  grpc::Status UploadKernelLibrary(grpc::ServerContext*, grpc::ServerReader<v1::UploadKernelLibraryRequest>*,
                                   v1::RegisterKernelLibraryResponse*) override;
  grpc::Status ListKernelLibraries(grpc::ServerContext*, const v1::ListKernelLibrariesRequest*,
                                   v1::ListKernelLibrariesResponse*) override;
  grpc::Status UnregisterKernelLibrary(grpc::ServerContext*, const v1::UnregisterKernelLibraryRequest*,
                                       v1::UnregisterKernelLibraryResponse*) override;

  // TriageService
  grpc::Status TriageLogs(grpc::ServerContext*, const v1::TriageLogsRequest*, v1::TriageLogsResponse*) override;

  // Updates the gauges of options.metrics (if any) from the scheduler and the worker registry.
  void RefreshMetrics() const;

  // The Job message (state, progress, spec, and results when asked). NOT_FOUND for unknown ids.
  absl::StatusOr<v1::Job> BuildJob(const std::string& job_id, bool include_results) const;

 private:
  // The caller, if its role suffices and (unless `rate_limited` is false)
  // it is within rpc_rate_per_second: PERMISSION_DENIED / UNAUTHENTICATED /
  // RESOURCE_EXHAUSTED (with a `retry-after-ms` trailer) otherwise.
  absl::StatusOr<auth::Caller> Authorize(grpc::ServerContext* ctx, v1::Role role, const char* method,
                                         bool rate_limited = true);
  absl::Status AuthorizeWorker(const grpc::ServerContext* ctx, const std::string& worker_id, const char* method) const;
  // State, progress and spec of a job (no results).
  v1::Job JobHead(const JobStatus& status) const;
  // The result as clients see it, with its triage.
  v1::TaskResult ResultOf(const TaskRecord& t, const v1::JobSpec& spec) const;
  // The archs a worker's device may take now (empty while draining).
  // FAILED_PRECONDITION for an unregistered worker.
  absl::StatusOr<std::set<std::string>> LeaseArchs(const std::string& worker_id, int device_index);
  // One lease attempt without waiting; fills `resp` and returns true on success.
  bool TryLease(const std::string& worker_id, const std::set<std::string>& archs, int device,
                v1::LeaseTaskResponse* resp);
  // RESOURCE_EXHAUSTED (and the suggested wait) when `client` may not submit now.
  absl::Status CheckSubmitLimits(const std::string& client, absl::Duration* retry_after);
  // Counts a finished task's triage in the metrics.
  void RecordTriage(const std::string& task_id);
  // Counts and logs a refused call (options.log, options.metrics).
  void Denied(const std::string& reason, const char* method, const std::string& who) const;
  // FAILED_PRECONDITION (counted as a denial) unless `worker_id` is registered.
  absl::Status Registered(const std::string& worker_id, const char* method) const ABSL_LOCKS_EXCLUDED(mu_);
  // A job stored under the bare `request_id` (a key without an owner) whose
  // owner is `principal`: that owner's retries find it.
  std::optional<std::string> LegacyRequest(const std::string& request_id, const std::string& principal) const;
  // ALREADY_EXISTS naming the first difference unless `spec` is the spec job
  // `job_id` was accepted with (an idempotent retry).
  absl::Status SameSpecAsFirst(const std::string& job_id, const v1::JobSpec& spec, const std::string& request_id) const;

  struct WorkerEntry {
    v1::WorkerCapabilities capabilities;
    std::set<std::string> archs;
    absl::Time last_heartbeat;
    bool draining = false;
    std::set<std::string> leases;
  };
  v1::WorkerStatus StatusOf(const std::string& id, const WorkerEntry& w) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Per arch, the Python environments its registered workers advertise (PlanJob's python_pools).
  std::map<std::string, std::string> PythonPools() const ABSL_LOCKS_EXCLUDED(mu_);

  struct ClientQuota {
    std::optional<TokenBucket> submits, calls;
    std::vector<std::string> jobs;  // submitted jobs, pruned when final
  };
  absl::Mutex quota_mu_;
  absl::flat_hash_map<std::string, ClientQuota> quotas_ ABSL_GUARDED_BY(quota_mu_);
  // Registers `r` (the content fields stamped from what is stored).
  absl::StatusOr<v1::KernelLibraryRegistration> RegisterWithContent(v1::KernelLibraryRegistration r,
                                                                    const std::string& by, bool require_content);
  std::unique_ptr<LibraryRegistry> own_libraries_;
  LibraryRegistry* libraries_ = nullptr;
  std::unique_ptr<LibraryContent> own_content_;
  LibraryContent* content_ = nullptr;
  std::unique_ptr<triage::LogClassifier> own_rules_;
  std::unique_ptr<triage::Ownership> own_ownership_, no_ownership_;
  const triage::LogClassifier* rules_ = nullptr;
  const triage::Ownership* ownership_ = nullptr;      // kernel triage
  const triage::Ownership* log_ownership_ = nullptr;  // log triage: only a configured map
  const Clock* clock_;
  Scheduler* scheduler_;
  const CoordinatorOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, WorkerEntry> workers_ ABSL_GUARDED_BY(mu_);
};

// Builds and starts a server for `coordinator` on `address` ("127.0.0.1:0"),
// with grpc.health.v1 and server reflection. *port receives the bound port.
// `credentials` null: plaintext (loopback deployments and tests).
std::unique_ptr<grpc::Server> StartServer(const std::string& address, Coordinator* coordinator, int* port,
                                          int max_message_bytes = 16 << 20,
                                          std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_COORDINATOR_SERVICE_H_
