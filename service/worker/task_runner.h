// Runs one validation task in this process: builds the guarded inputs the
// TaskSpec describes, runs the baseline and the candidate kernel (through the
// kernel ABI) on poisoned outputs, compares each with the FP32 reference and
// times them. A kernel that refuses the config or fails is reported as
// VERDICT_ERROR with its reason; the task itself still succeeds.
#ifndef MXVAL_SERVICE_WORKER_TASK_RUNNER_H_
#define MXVAL_SERVICE_WORKER_TASK_RUNNER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/abi/kernel_library.h"
#include "kernels/runtime/device_runtime.h"
#include "validation/device_case.h"
#include "validation/roofline.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {
namespace worker {

// Loads a Python kernel library from `dir`, a verified private copy of its
// tree whose manifest names it `name` and whose tree digest is `sha256`
// (the host keys its compile cache by it): returns its kernel table (valid for
// the life of the process). The Python task host provides it
// (kernels/python/mxval_pyhost.py); errors are the library's (an import
// error, a manifest naming a missing function).
using PythonLibraryLoader =
    std::function<absl::StatusOr<const mxval_kernel_library*>(const std::string& dir, const std::string& name,
                                                              const std::string& sha256)>;

// Finds kernels by library name: the built-in CPU library; the built-in GPU
// libraries "mxval-builtin-cuda" / "mxval-builtin-hip"
// (libmxval_{cuda,hip}_kernels.so in `builtin_dir`, normally <bin>/../lib);
// external shared objects lib<name>.so in `kernel_dir`, loaded only when
// the file's SHA-256 equals the digest the task carries (KernelRef.sha256,
// stamped by the coordinator from the admin's registration); and Python
// libraries, directories <name>/ in `kernel_dir` (KernelRef.format PYTHON),
// copied into a private directory under `scratch_dir` while their tree is
// hashed (common/tree_digest.h), and handed to `python_loader` only when the
// copy's digest is the registered one: the bytes checked are the bytes
// imported. An external library that `kernel_dir` lacks, or holds with
// another digest, is looked for in `library_cache` (the worker's fetched
// copies, service/worker/library_cache.h) as <library_cache>/<sha256>/
// lib<name>.so or <sha256>/<name>/, with the same checks. Each is loaded
// once and kept open.
class KernelResolver {
 public:
  explicit KernelResolver(std::string kernel_dir = "", std::string builtin_dir = "",
                          PythonLibraryLoader python_loader = nullptr, std::string scratch_dir = "",
                          std::string library_cache = "");
  ~KernelResolver();  // removes the private copies
  // NOT_FOUND (naming what exists) for unknown libraries or kernels;
  // FAILED_PRECONDITION for a library whose build_id differs from the one
  // asked, or a Python library in a child without a Python loader;
  // PERMISSION_DENIED for an external library whose digest differs or that
  // resolves outside kernel_dir; INVALID_ARGUMENT for a task without a
  // digest; the loader's error for a Python library that does not load.
  absl::StatusOr<const mxval_kernel*> Resolve(const v1::KernelRef& ref);

 private:
  // From `dir`: the kernel directory or a cache slot.
  absl::StatusOr<std::unique_ptr<KernelLibrary>> OpenPython(const v1::KernelRef& ref, const std::string& dir);
  // From the kernel directory, else from the cache.
  absl::StatusOr<std::unique_ptr<KernelLibrary>> OpenExternal(const v1::KernelRef& ref);
  std::string dir_, builtin_dir_, cache_dir_;
  PythonLibraryLoader python_loader_;
  std::string scratch_dir_;
  std::vector<std::string> copies_;
  // Keyed by the requested library name (a table's own name may differ).
  std::vector<std::pair<std::string, std::unique_ptr<KernelLibrary>>> libraries_;
};

struct TaskRunnerOptions {
  int64_t max_task_bytes = int64_t{16} << 30;
  int threads = 0;
  // With a current device: GPU kernels of the runtime's kind run on device
  // mirrors of the inputs (validation/device_case.h) and are timed with the
  // GPU harness. Null: such kernels get VERDICT_ERROR ("no device").
  DeviceRuntime* runtime = nullptr;
  TimingOptions device_timing;
  // After a task's device sides are timed, measure the device's roofline
  // (validation/roofline.h: copy bandwidth, bf16 GEMM rate) and give each
  // timed device side its floor and roofline fraction. About 0.1 s per
  // task on the H200 (a 16-task job took 28.0 s with it, 26.5 s without;
  // BENCHMARKS.md); CPU-only tasks never measure.
  bool measure_roofline = true;
  RooflineOptions roofline;
  // Called with the result as checked and timed, right before the roofline
  // is measured (only when it will be), its roofline note set to
  // kRooflineInterruptedNote (child_results.h). The task's child writes it
  // out at once, so that a crash inside the roofline's cuBLAS does not
  // take the task's checks with it.
  std::function<void(const v1::TaskResult&)> on_checked;
  // Set to whether the device faulted during the task (its context is then
  // unusable: a serving child must not run another task on it).
  bool* device_faulted = nullptr;
};

// The result's DeviceRoofline from `r`, and each of `device_sides` (timed,
// median_us > 0) its floor_us and roofline_fraction for `shape`; sides keep
// 0 where the roofline has no copy bandwidth.
void FillRoofline(const Roofline& r, const GemmShape& shape, v1::TaskResult* result,
                  const std::vector<v1::KernelRun*>& device_sides);

// A timing window's clock as the result reports it.
void FillClock(const ClockSummary& clock, v1::ClockWindow* out);

// The clock reader for device `index` of `runtime` (NVML for cuda, found by
// the device's PCI bus id), or null with the reason in *note (no NVML, a
// hip or host runtime: no reader exists for those here).
std::unique_ptr<ClockReader> OpenDeviceClocks(DeviceRuntime& runtime, int index, std::string* note);

// INVALID_ARGUMENT for a malformed TaskSpec; RESOURCE_EXHAUSTED over the memory cap.
absl::StatusOr<v1::TaskResult> RunTask(const v1::TaskSpec& task, KernelResolver& kernels,
                                       const TaskRunnerOptions& options);

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_TASK_RUNNER_H_
