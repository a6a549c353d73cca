// Turns a submitted JobSpec into the tasks the coordinator schedules.
//
// Validation names the offending field in every INVALID_ARGUMENT
// ("spec.shapes[1].k: 100 is not a positive multiple of 32") and runs before
// anything is stored, so a bad spec leaves no trace. Expansion: presets and
// shapes x M values x target archs; for each task the baseline and candidate
// dispatch entries are resolved now (from the job's tables or the built-in
// table of the arch), so a task is self-contained and a retuned table is
// visible per task as a different entry or config.
#ifndef MXVAL_SERVICE_COORDINATOR_JOB_PLANNER_H_
#define MXVAL_SERVICE_COORDINATOR_JOB_PLANNER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {
namespace coordinator {

struct PlannerOptions {
  // Estimated host memory one task may need (inputs, guards, outputs, reference).
  int64_t max_task_bytes = int64_t{16} << 30;
  // Elements in any one tensor of a task (x with its pitch, w, y): kernels
  // index with 32-bit offsets in places, so larger tensors are refused.
  int64_t max_tensor_elements = (int64_t{1} << 31) - 1;
  // Estimated device memory of one GPU task (x, w, scales, y, the split-K
  // workspace of the larger config); the timing harness's rotating copies
  // are bounded separately by the harness.
  int64_t max_device_bytes_per_task = int64_t{16} << 30;
  int max_tasks_per_job = 100000;
  int max_m = 1 << 20;
  // Built-in kernel libraries a job may name; external ones must be registered (LibraryMap).
  std::set<std::string> builtin_libraries = {"mxval-builtin-cpu", "mxval-builtin-cuda", "mxval-builtin-hip"};
  std::set<std::string> known_archs = {"cpu", "sm_90a", "gfx90a", "gfx940", "gfx942", "gfx950"};
  // Built-in dispatch table JSON per arch (used when the job gives none).
  std::map<std::string, std::string> default_tables;
  static PlannerOptions WithBuiltinTables();
};

struct PlannedTask {
  v1::TaskSpec spec;      // task_id / job_id left empty: the scheduler assigns them
  std::string dedup_key;  // equal keys: identical work (kernels, builds, shape, configs, inputs)
};

struct JobPlan {
  std::vector<PlannedTask> tasks;
  int priority = 0;
  std::optional<absl::Duration> deadline;
};

// Admin-registered external kernel libraries by name (LibraryRegistry).
using LibraryMap = std::map<std::string, v1::KernelLibraryRegistration>;

// INVALID_ARGUMENT (field named) for a bad spec, an unregistered external
// library or a build_id other than the registered one; RESOURCE_EXHAUSTED if
// the job expands past max_tasks_per_job. Tasks naming an external library
// carry its registered SHA-256 (KernelRef.sha256; a client's value is ignored).
//
// `python_pools`: per arch, the Python environments (interpreter, PyTorch,
// Triton versions) of the workers that serve it, as one string. A task with
// a side in a Python library includes its arch's in its dedup key: a result
// is reused only while the pool that would run the task again is the pool
// that ran it (a PyTorch or Triton upgrade is new work).
absl::StatusOr<JobPlan> PlanJob(const v1::JobSpec& spec, const PlannerOptions& options,
                                const LibraryMap& libraries = {},
                                const std::map<std::string, std::string>& python_pools = {});

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_JOB_PLANNER_H_
