#include "service/worker/python_host.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "service/worker/child_runner.h"

namespace mxval {
namespace worker {

absl::StatusOr<std::string> FindExecutable(const std::string& python) {
  if (python.empty()) return absl::InvalidArgumentError("--python: empty");
  if (python.find('/') != std::string::npos) {
    if (access(python.c_str(), X_OK) != 0) return absl::NotFoundError(absl::StrCat("'", python, "' is not executable"));
    return python;
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    const std::string candidate = absl::StrCat(dir, "/", python);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("no '", python, "' in PATH"));
}

absl::StatusOr<std::vector<std::string>> PythonChildArgv(const PythonHostOptions& o, bool serve) {
  auto python = FindExecutable(o.python);
  if (!python.ok()) return python.status();
  const std::string so = absl::StrCat(o.lib_dir, "/libmxval_task.so");
  const std::string host = absl::StrCat(o.lib_dir, "/mxval_pyhost.py");
  for (const std::string& f : {so, host}) {
    if (access(f.c_str(), R_OK) != 0) return absl::NotFoundError(absl::StrCat("'", f, "' is missing"));
  }
  std::vector<std::string> argv = {*python, "-I", host, "--task-lib", so};
  if (!o.cache_dir.empty()) argv.insert(argv.end(), {"--cache-dir", o.cache_dir});
  if (serve) argv.push_back("--serve");
  argv.push_back("--");
  return argv;
}

absl::StatusOr<v1::PythonEnvironment> ProbePython(const PythonHostOptions& o, absl::Duration timeout) {
  auto argv = PythonChildArgv(o);
  if (!argv.ok()) return argv.status();
  ChildOptions co;
  co.argv = {(*argv)[0], "-I", (*argv)[2], "--describe"};
  co.timeout = timeout;
  co.max_stdout_bytes = 64 << 10;
  auto out = RunChild(co, "");
  if (!out.ok()) return out.status();
  if (!out->success) {
    return absl::UnavailableError(absl::StrCat("'", (*argv)[0], "' --describe: ", out->Describe(), "; stderr: ",
                                               out->stderr_tail.substr(0, 1000)));
  }
  const nlohmann::json j = nlohmann::json::parse(out->out, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::UnavailableError(absl::StrCat("'", (*argv)[0], "' --describe: not JSON"));
  auto field = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>().substr(0, 256) : std::string();
  };
  v1::PythonEnvironment e;
  e.set_interpreter(field("interpreter"));
  e.set_python_version(field("python_version"));
  e.set_torch_version(field("torch_version"));
  e.set_triton_version(field("triton_version"));
  e.set_backend(field("backend"));
  if (e.torch_version().empty()) {
    return absl::UnavailableError(absl::StrCat("'", (*argv)[0], "' has no PyTorch (Python kernel libraries need it)"));
  }
  return e;
}

bool HasPythonSide(const v1::TaskSpec& task) {
  return task.baseline_kernel().format() == v1::LIBRARY_FORMAT_PYTHON ||
         task.candidate_kernel().format() == v1::LIBRARY_FORMAT_PYTHON;
}

std::string DescribePython(const v1::PythonEnvironment& e) {
  return absl::StrCat("python ", e.python_version(), " (", e.interpreter(), "), torch ",
                      e.torch_version().empty() ? "-" : e.torch_version(), ", triton ",
                      e.triton_version().empty() ? "-" : e.triton_version(), ", ", e.backend());
}

}  // namespace worker
}  // namespace mxval
