// The worker's task child: one task in an isolated process. The `mxval
// __run-task` verb runs it in the mxval binary; for a task with a side in a
// Python kernel library the worker runs it inside the library's Python
// interpreter instead (kernels/python/mxval_pyhost.py loads libmxval_task.so
// and calls it through task_child_capi.cc), so both kinds of kernel go
// through the same RunTask: same guards, reference, timing and verdicts.
//
// Protocol: a serialized TaskSpec on `in`; on `out` the header line
// (child_results.h) and delimited TaskResults, the last one the whole result.
#ifndef MXVAL_SERVICE_WORKER_TASK_CHILD_H_
#define MXVAL_SERVICE_WORKER_TASK_CHILD_H_

#include <istream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "service/worker/task_runner.h"

namespace mxval {
namespace worker {

struct TaskChildHooks {
  // Where the built-in GPU kernel libraries are (libmxval_cuda_kernels.so).
  std::string builtin_dir;
  // Loads a verified Python library tree; null in the mxval binary, which
  // then reports a Python side as an ERROR saying the worker must run it.
  PythonLibraryLoader python_loader;
  // The interpreter the task ran in: stamped into the result (TaskResult.python).
  v1::PythonEnvironment python;
};

// One task child: its device runtime, clock reader and kernel libraries
// (Python ones imported once) are set up once and serve every task it runs.
class TaskChild {
 public:
  // `args`: the verb's flags (without "__run-task"). INVALID_ARGUMENT naming
  // a bad flag; the runtime's error when the device cannot be opened. With
  // --help, *usage is set and no child is made.
  static absl::StatusOr<std::unique_ptr<TaskChild>> Create(const std::vector<std::string>& args,
                                                           TaskChildHooks hooks, std::string* usage);
  // Runs the serialized TaskSpec `task` and writes its results to `out`.
  // INVALID_ARGUMENT when `task` is not a TaskSpec; RunTask's errors; INTERNAL
  // when `out` fails.
  absl::Status Run(const std::string& task, std::ostream& out);
  // Whether the last task's device faulted: the device context is unusable
  // and the child must end (a serving child says so with kRetireExitCode).
  bool device_faulted() const { return device_faulted_; }

 private:
  TaskChild() = default;
  TaskChildHooks hooks_;
  std::unique_ptr<DeviceRuntime> runtime_;
  std::unique_ptr<ClockReader> clocks_;
  std::unique_ptr<KernelResolver> kernels_;
  TaskRunnerOptions options_;
  bool device_faulted_ = false;
};

// The exit code a serving child's end frame carries when the task's results
// were written but the child must not run another task (its device faulted).
inline constexpr int kRetireExitCode = 4;

// The exit code of a child that ended with `st`: 0 for OK, 2 for a caller's
// mistake (bad flags or input), 3 otherwise.
int TaskChildExitCode(const absl::Status& st);

// `mxval __run-task`: one task from `in`. Returns the exit code.
int RunTaskChildMain(const std::vector<std::string>& args, std::istream& in, std::ostream& out, std::ostream& err,
                     const TaskChildHooks& hooks);

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_TASK_CHILD_H_
