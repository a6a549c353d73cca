// Runs a command in a child process with a watchdog: stdin fed from a
// buffer, stdout captured, the tail of stderr kept. A crash (signal), a
// non-zero exit, a timeout or a cancel (the whole process group is
// SIGKILLed, so what the child started goes too) is reported as an outcome,
// never as a failure of the caller.
#ifndef MXVAL_SERVICE_WORKER_CHILD_RUNNER_H_
#define MXVAL_SERVICE_WORKER_CHILD_RUNNER_H_

#include <atomic>
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
  bool cancelled = false;   // ChildCancel::Cancel() stopped it (or it never started)
  std::string out;          // stdout (capped)
  std::string stderr_tail;  // last bytes of stderr
  // "exit code 3", "killed by signal 11 (Segmentation fault)", "timed out (process group killed)",
  // "cancelled (process group killed)".
  std::string Describe() const;
};

// Stops a running child from another thread: the runner watches fd() along
// with the child's pipes, so a Cancel() SIGKILLs the child's process group
// at once; a child not yet started for a cancelled token never starts.
// Thread-safe; Cancel() is idempotent.
class ChildCancel {
 public:
  ChildCancel();
  ~ChildCancel();
  ChildCancel(const ChildCancel&) = delete;
  ChildCancel& operator=(const ChildCancel&) = delete;
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }
  int fd() const { return fd_; }  // readable once cancelled

 private:
  int fd_ = -1;  // eventfd
  std::atomic<bool> cancelled_{false};
};

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is the program path
  absl::Duration timeout = absl::Minutes(10);
  size_t max_stdout_bytes = 256 << 20;
  size_t stderr_tail_bytes = 4096;
  const ChildCancel* cancel = nullptr;  // optional; must outlive the run
};

// INTERNAL only if the child cannot be started at all (pipes, spawn).
absl::StatusOr<ChildOutcome> RunChild(const ChildOptions& options, const std::string& stdin_bytes);

// A long-lived child that runs one task after another (the Python task
// child, whose interpreter, PyTorch and device context then start once, not
// per task). The protocol: for each task the caller's bytes go to the
// child's stdin as one frame, [u32 length, little-endian][bytes]; the child
// answers with frames of what a one-shot child writes on stdout, then the end
// frame [u32 0][i32 exit code]. A child that dies, hangs past the timeout
// (its process group is killed) or has run `max_tasks` tasks is replaced on
// the next Run, so a crash or hang still costs only the task it happened in.
// Not thread-safe: one per executor.
class PersistentChild {
 public:
  // options.timeout is per task (Run's argument); the rest as for RunChild.
  explicit PersistentChild(ChildOptions options, int max_tasks = 256);
  ~PersistentChild();  // closes the child's stdin (it exits) and reaps it, killing it after 5 s
  PersistentChild(const PersistentChild&) = delete;
  PersistentChild& operator=(const PersistentChild&) = delete;

  // One task. The outcome as RunChild's: `out` holds the payload of the
  // frames, success means the end frame came with exit code 0; a child that
  // ended or was killed during the task reports how (signal, exit code,
  // timed_out) with what it wrote before. A `cancel` fired during the task
  // kills the child (cancelled; the next Run starts a new one). INTERNAL
  // only if no child can be started.
  absl::StatusOr<ChildOutcome> Run(const std::string& task_bytes, absl::Duration timeout,
                                   const ChildCancel* cancel = nullptr);

  bool running() const { return pid_ > 0; }
  int tasks_run() const { return tasks_; }  // by the current child

 private:
  absl::Status Start();
  // Ends the child: closes its stdin, then waits up to `grace` before
  // SIGKILLing its process group; fills *o's exit_code / signal if given.
  void Stop(absl::Duration grace, ChildOutcome* o);

  ChildOptions options_;
  int max_tasks_;
  int pid_ = -1, in_ = -1, out_ = -1, err_ = -1;
  int tasks_ = 0;
};

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_CHILD_RUNNER_H_
