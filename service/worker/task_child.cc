#include "service/worker/task_child.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/flags.h"
#include "service/worker/child_results.h"

namespace mxval {
namespace worker {
int TaskChildExitCode(const absl::Status& st) {
  switch (st.code()) {  // as the CLI maps statuses to exit codes (client/cli.h)
    case absl::StatusCode::kOk: return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kResourceExhausted: return 2;
    default: return 3;
  }
}

absl::StatusOr<std::unique_ptr<TaskChild>> TaskChild::Create(const std::vector<std::string>& args,
                                                             TaskChildHooks hooks, std::string* usage) {
  std::string kernel_dir, runtime_kind, scratch_dir, library_cache;
  int64_t threads = 0, device = 0;
  FlagSet f("__run-task",
            "Internal: runs one task for the worker daemon (TaskSpec on stdin; on stdout the header line "
            "mxval-task-results-v1, then delimited TaskResults, the last one the whole result).");
  f.String("kernel-dir", &kernel_dir, "directory of external kernel libraries (lib<name>.so, <name>/ for Python)");
  f.String("library-cache", &library_cache,
           "the worker's cache of libraries fetched from the coordinator (<dir>/<sha256>/lib<name>.so, .../<name>/)");
  f.String("scratch-dir", &scratch_dir, "private directory for verified copies of Python library trees (default: $TMPDIR)");
  f.Int("threads", &threads, "threads (0 = all)");
  f.String("runtime", &runtime_kind, "device runtime for GPU kernels: cuda or hip (empty: CPU only)");
  f.Int("device", &device, "device index for --runtime");
  if (absl::Status st = f.Parse(args); !st.ok()) return st;
  if (f.help_requested()) {
    *usage = f.Usage();
    return nullptr;
  }
  std::unique_ptr<TaskChild> c(new TaskChild());
  if (!runtime_kind.empty()) {
    auto rt = OpenRuntime(runtime_kind);
    if (!rt.ok()) return rt.status();
    if (absl::Status s = (*rt)->SetDevice(static_cast<int>(device)); !s.ok()) return s;
    c->runtime_ = std::move(*rt);
  }
  c->kernels_ =
      std::make_unique<KernelResolver>(kernel_dir, hooks.builtin_dir, hooks.python_loader, scratch_dir, library_cache);
  c->hooks_ = std::move(hooks);
  TaskRunnerOptions& o = c->options_;
  o.threads = static_cast<int>(threads);
  o.runtime = c->runtime_.get();
  // Every device timing records the SM clock it ran at (and waits for the
  // board to come off its power cap first) where the clocks can be read.
  // The worker's environment reaches this child: MXVAL_CLOCKS=off turns the
  // reader off, MXVAL_CLOCK_POLL_MS (1-1000, default 5) sets how often the
  // clock is read while the samples run.
  if (c->runtime_ != nullptr) {
    const char* off = std::getenv("MXVAL_CLOCKS");
    if (off != nullptr && std::string(off) == "off") {
      o.device_timing.no_clock_note = "clock reading turned off (MXVAL_CLOCKS=off)";
    } else {
      c->clocks_ = OpenDeviceClocks(*c->runtime_, static_cast<int>(device), &o.device_timing.no_clock_note);
      o.device_timing.clocks = c->clocks_.get();
    }
    int poll_ms = 0;
    if (const char* p = std::getenv("MXVAL_CLOCK_POLL_MS"); p != nullptr && absl::SimpleAtoi(p, &poll_ms)) {
      o.device_timing.clock_poll = absl::Milliseconds(std::clamp(poll_ms, 1, 1000));
    }
    // Each task with a device side measures its device's roofline after
    // timing it (validation/roofline.h); MXVAL_ROOFLINE=off skips that.
    if (const char* r = std::getenv("MXVAL_ROOFLINE"); r != nullptr && std::string(r) == "off") {
      o.measure_roofline = false;
    }
  }
  return c;
}

absl::Status TaskChild::Run(const std::string& bytes, std::ostream& out) {
  v1::TaskSpec task;
  if (!task.ParseFromString(bytes)) return absl::InvalidArgumentError("stdin: not a TaskSpec");
  const bool in_python = hooks_.python_loader != nullptr;
  auto stamp = [&](v1::TaskResult* r) {
    if (in_python) *r->mutable_python() = hooks_.python;
  };
  // The delimited TaskResults (child_results.h): the checkpoint before the
  // roofline, then the whole result.
  TaskRunnerOptions o = options_;
  device_faulted_ = false;
  o.device_faulted = &device_faulted_;
  bool written = WriteChildResultsHeader(out);
  o.on_checked = [&](const v1::TaskResult& checkpoint) {
    v1::TaskResult c = checkpoint;
    stamp(&c);
    written = WriteChildResult(c, out) && written;
  };
  auto result = RunTask(task, *kernels_, o);
  if (!result.ok()) return result.status();
  stamp(&*result);
  if (!WriteChildResult(*result, out) || !written) return absl::InternalError("cannot write stdout");
  return absl::OkStatus();
}

int RunTaskChildMain(const std::vector<std::string>& args, std::istream& in, std::ostream& out, std::ostream& err,
                     const TaskChildHooks& hooks) {
  std::string usage;
  auto child = TaskChild::Create(args, hooks, &usage);
  if (!child.ok()) {
    err << "mxval __run-task: " << child.status().message() << "\n";
    return TaskChildExitCode(child.status());
  }
  if (*child == nullptr) {
    out << usage;
    return 0;
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const absl::Status st = (*child)->Run(bytes, out);
  if (!st.ok()) err << "mxval __run-task: " << st.message() << "\n";
  return TaskChildExitCode(st);
}

}  // namespace worker
}  // namespace mxval
