// The worker daemon's core: registers with the coordinator (outbound only),
// runs one executor thread per device that long-polls for a lease, runs the
// task in an isolated child process (child_runner) and reports the result;
// a heartbeat thread renews running leases. A crash, hang or kill of the
// child is reported as an infrastructure failure and the worker goes on; a
// device with `unhealthy_after` consecutive infrastructure failures of tasks
// that run only mxval's own kernels stops taking work and is re-advertised
// as unhealthy (a registered library's crash is blamed on it, not the device).
//
// The coordinator steers the worker through heartbeat answers: a lease it
// names lost (its job was cancelled, or it expired) has its child killed
// (process group) and nothing reported for it, as does a result the
// coordinator answers accepted=false; `drain` makes the executors finish
// their tasks and lease nothing while the heartbeats go on, so an undrain
// (drain=false) resumes leasing. Only Drain() (SIGTERM) ends the worker:
// it stops leasing, lets running tasks finish and report, then Run() returns.
// Heartbeats come at the coordinator's interval but at least 3 per lease.
#ifndef MXVAL_SERVICE_WORKER_WORKER_H_
#define MXVAL_SERVICE_WORKER_WORKER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "mxval/v1/mxval.grpc.pb.h"
#include "service/worker/child_runner.h"
#include "service/worker/library_cache.h"
#include "service/worker/worker_metrics.h"

namespace mxval {
namespace worker {

struct WorkerOptions {
  std::string coordinator;  // "127.0.0.1:port"
  std::string worker_id;    // default: hostname-pid
  std::vector<v1::DeviceInfo> devices;  // default: one healthy "cpu" device
  // Runtime of `devices` ("cuda", "hip", "host"; "" for the CPU): each
  // task's child gets "--runtime R --device INDEX" appended to child_argv.
  std::string device_runtime;
  std::vector<v1::KernelLibraryInfo> libraries;
  std::vector<std::string> child_argv;
  // Tasks with a side in a Python kernel library run in a Python task child
  // (python_host.h): this argv prefix (PythonChildArgv, ending with "--"),
  // then child_argv's flags (after its program and verb). Empty: no usable
  // interpreter, and such a task is an infrastructure failure saying why
  // (python_unavailable), so that another worker takes it.
  std::vector<std::string> python_child_argv;
  // With python_child_argv naming a serving host (`--serve`): one
  // long-lived Python child per device runs the device's Python tasks
  // (PersistentChild), replaced after a crash, a hang or this many tasks.
  bool python_serving = false;
  int python_tasks_per_child = 256;
  std::string python_unavailable = "this worker runs no Python kernel libraries (no --python)";
  std::optional<v1::PythonEnvironment> python;  // advertised at registration
  // Channel credentials (TLS with a client certificate); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // e.g. {"/path/mxval", "__run-task", "--kernel-dir", dir}
  absl::Duration task_timeout = absl::Minutes(10);
  absl::Duration long_poll = absl::Seconds(5);
  absl::Duration rpc_timeout = absl::Seconds(15);
  int unhealthy_after = 3;
  WorkerMetrics* metrics = nullptr;  // optional
  // Registered libraries a task names are fetched from the coordinator into
  // this cache before the task's child runs (library_cache.h); child_argv
  // must pass the same directory as --library-cache. Empty dir: nothing is
  // fetched (the child finds libraries only in its --kernel-dir).
  LibraryCacheOptions library_cache;
};

class Worker {
 public:
  // INVALID_ARGUMENT for missing coordinator / child_argv. Does not connect yet.
  static absl::StatusOr<std::unique_ptr<Worker>> Create(WorkerOptions options);
  ~Worker();

  // Registers (retrying while the coordinator is unavailable) and serves
  // until Drain() (or until every device is unhealthy); returns once every
  // running task has reported. A drain from the coordinator does not end it.
  absl::Status Run();
  // Shuts the worker down (SIGTERM): no new leases, running tasks finish
  // and report, Run() returns. Thread-safe, idempotent; callable from a
  // signal-watching thread.
  void Drain();

  // Tasks whose result (checked, or an infrastructure failure) the
  // coordinator accepted.
  int64_t tasks_completed() const { return completed_.load(); }
  int64_t infra_failures() const { return infra_failures_.load(); }
  // Tasks dropped unreported because their lease was lost or their result
  // not accepted.
  int64_t tasks_abandoned() const { return abandoned_.load(); }
  bool device_healthy(int index) const;
  // Whether the coordinator has this worker drained (its last heartbeat answer).
  bool drained_by_coordinator() const { return coordinator_drain_.load(); }
  // The interval heartbeats are sent at (from the last registration).
  absl::Duration heartbeat_interval() const { return absl::Milliseconds(heartbeat_ms_.load()); }

 private:
  explicit Worker(WorkerOptions options);
  absl::Status Register();
  void Executor(int device_slot);
  void Heartbeats();
  // Reports (retrying until the coordinator answers). With `next`, asks for
  // the next lease in the same call; true when one was granted into *next.
  // *accepted: whether the coordinator recorded the result (false: the lease
  // was lost, or the coordinator refused the report).
  bool Report(const std::string& lease_id, const v1::TaskResult& result, int device_index,
              v1::LeaseTaskResponse* next, bool* accepted);
  // A lease the coordinator took away: logged and counted; nothing is reported.
  void Abandon(const std::string& lease_id, const std::string& task_id, const std::string& reason);
  // Blocks while the coordinator has the worker drained and it is not
  // shutting down.
  void AwaitUndrain();
  // Cancels the executors' long polls in flight (a drain, a shutdown).
  void CancelPollsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration d) const;
  // Fetches the external libraries `task` names into the library cache.
  // Returns a side's error ("baseline"/"candidate" -> why its library is
  // unusable: a digest mismatch, content too large); a fetch that failed
  // for want of the coordinator is an infrastructure failure (*infra).
  std::map<std::string, std::string> EnsureLibraries(const v1::TaskSpec& task, std::string* infra);
  absl::Status FetchContent(const std::string& sha256,
                            const std::function<absl::Status(int64_t, v1::LibraryFormat)>& begin,
                            const std::function<absl::Status(absl::string_view)>& write);

  WorkerOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::unique_ptr<LibraryCache> cache_;  // null without options_.library_cache.dir
  // Written under mu_ (so that AwaitUndrain's condition is re-evaluated),
  // read anywhere.
  std::atomic<bool> shutting_down_{false};     // Drain(): finish and return from Run()
  std::atomic<bool> coordinator_drain_{false};  // HeartbeatResponse.drain: finish, lease nothing, keep heartbeating
  std::atomic<int64_t> completed_{0}, infra_failures_{0}, abandoned_{0};
  std::atomic<int64_t> heartbeat_ms_{1000};  // from the coordinator at registration
  std::atomic<bool> registered_once_{false};  // the first registration logs the interval
  mutable absl::Mutex mu_;
  // Running leases and the cancel of each one's child: a heartbeat answer
  // naming a lease lost fires it.
  std::map<std::string, std::shared_ptr<ChildCancel>> running_leases_ ABSL_GUARDED_BY(mu_);
  std::vector<int> consecutive_failures_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> polls_ ABSL_GUARDED_BY(mu_);  // LeaseTask calls in flight
};

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_WORKER_H_
