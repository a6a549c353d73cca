// Runs a command in a child process with a watchdog: stdin fed from a
// buffer, stdout captured, the tail of stderr kept. A crash (signal), a
// non-zero exit or a timeout (the whole process group is SIGKILLed) is
// reported as an outcome, never as a failure of the caller.
#ifndef MXVAL_SERVICE_WORKER_CHILD_RUNNER_H_
#define MXVAL_SERVICE_WORKER_CHILD_RUNNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mxval {
namespace worker {

struct ChildOutcome {
  bool success = false;     // exited 0 within the timeout
  int exit_code = -1;       // when it exited
  int signal = 0;           // when a signal ended it (SIGKILL after a timeout too)
  bool timed_out = false;
  std::string out;          // stdout (capped)
  std::string stderr_tail;  // last bytes of stderr
  // "exit code 3", "killed by signal 11 (Segmentation fault)", "timed out after 5s (killed)".
  std::string Describe() const;
};

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is the program path
  absl::Duration timeout = absl::Minutes(10);
  size_t max_stdout_bytes = 256 << 20;
  size_t stderr_tail_bytes = 4096;
};

// INTERNAL only if the child cannot be started at all (pipes, spawn).
absl::StatusOr<ChildOutcome> RunChild(const ChildOptions& options, const std::string& stdin_bytes);

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_CHILD_RUNNER_H_
