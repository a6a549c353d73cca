// How a worker runs tasks with a side in a Python kernel library: in its
// --python interpreter, through kernels/python/mxval_pyhost.py, which loads
// libmxval_task.so (the same task child as `mxval __run-task`) and imports
// the library (kernels/python/README.md).
#ifndef MXVAL_SERVICE_WORKER_PYTHON_HOST_H_
#define MXVAL_SERVICE_WORKER_PYTHON_HOST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {
namespace worker {

struct PythonHostOptions {
  std::string python = "python3";  // a path, or a name looked up in PATH
  std::string lib_dir;             // holds libmxval_task.so and mxval_pyhost.py (<prefix>/lib)
  std::string cache_dir;           // compile caches, one per library build (Triton's)
};

// `python` as an absolute path: itself when it has a '/', else the first
// executable of that name in PATH. NOT_FOUND when there is none.
absl::StatusOr<std::string> FindExecutable(const std::string& python);

// The argv of a Python task child up to and including "--"; the task
// child's flags (as `mxval __run-task` takes them) follow it. With `serve`,
// a long-lived child that runs task after task (PersistentChild's
// protocol). NOT_FOUND when the interpreter, libmxval_task.so or
// mxval_pyhost.py is missing.
absl::StatusOr<std::vector<std::string>> PythonChildArgv(const PythonHostOptions& o, bool serve = false);

// The interpreter's environment (versions of Python, PyTorch, Triton), from
// the host's --describe. UNAVAILABLE (with the interpreter's stderr tail)
// when it does not run within `timeout` or PyTorch is not importable there.
absl::StatusOr<v1::PythonEnvironment> ProbePython(const PythonHostOptions& o, absl::Duration timeout);

// Whether a side of `task` names a Python kernel library.
bool HasPythonSide(const v1::TaskSpec& task);

// "python 3.12.3 (/usr/bin/python3), torch 2.11.0+cu130, triton 3.6.0, cuda 13.0"
std::string DescribePython(const v1::PythonEnvironment& e);

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_PYTHON_HOST_H_
