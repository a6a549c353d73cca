#include "service/worker/child_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

#include <algorithm>

extern char** environ;

namespace mxval {
namespace worker {

std::string ChildOutcome::Describe() const {
  if (cancelled) return "cancelled (process group killed)";
  if (timed_out) return "timed out (process group killed)";
  if (signal != 0) return absl::StrCat("killed by signal ", signal, " (", strsignal(signal), ")");
  if (exit_code != 0) return absl::StrCat("exit code ", exit_code);
  return "exit code 0";
}

ChildCancel::ChildCancel() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
ChildCancel::~ChildCancel() {
  if (fd_ >= 0) close(fd_);
}

void ChildCancel::Cancel() {
  if (cancelled_.exchange(true)) return;
  const uint64_t one = 1;
  if (fd_ >= 0) (void)!write(fd_, &one, sizeof(one));
}

namespace {

// A child that exits before reading all of its stdin must not take this
// process with it: the write fails with EPIPE instead of raising SIGPIPE
// (the worker's gRPC ignores it too; a test or tool may not have set that up).
void IgnoreSigpipe() {
  static const bool once = [] { return signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)once;
}


// Spawns argv in its own process group with pipes for stdin, stdout and
// stderr; returns the pid and the parent's ends.
absl::Status Spawn(const std::vector<std::string>& args, int* pid, int* in_w, int* out_r, int* err_r) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t p = -1;
  const int rc = posix_spawn(&p, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    close(err[0]);
    return absl::InternalError(absl::StrCat("spawn ", args[0], ": ", strerror(rc)));
  }
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  *pid = p;
  *in_w = in[1];
  *out_r = out[0];
  *err_r = err[0];
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChildOutcome> RunChild(const ChildOptions& o, const std::string& stdin_bytes) {
  if (o.argv.empty()) return absl::InvalidArgumentError("argv: empty");
  IgnoreSigpipe();
  ChildOutcome res;
  if (o.cancel != nullptr && o.cancel->cancelled()) {
    res.cancelled = true;
    return res;
  }
  int pid = -1, in_w = -1, out_r = -1, err_r = -1;  // its own process group: a timeout kills its children too
  if (absl::Status st = Spawn(o.argv, &pid, &in_w, &out_r, &err_r); !st.ok()) return st;
  size_t written = 0;
  bool in_open = true, out_open = true, err_open = true;
  if (stdin_bytes.empty()) {
    close(in_w);
    in_open = false;
  }
  const absl::Time deadline = absl::Now() + o.timeout;
  char buf[65536];
  while (out_open || err_open) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      res.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (o.cancel != nullptr && o.cancel->cancelled()) {
      res.cancelled = true;
      kill(-pid, SIGKILL);
      break;
    }
    pollfd fds[4];
    int n = 0;
    if (in_open) fds[n++] = {in_w, POLLOUT, 0};
    if (out_open) fds[n++] = {out_r, POLLIN, 0};
    if (err_open) fds[n++] = {err_r, POLLIN, 0};
    if (o.cancel != nullptr && o.cancel->fd() >= 0) fds[n++] = {o.cancel->fd(), POLLIN, 0};
    if (poll(fds, n, static_cast<int>(std::min<int64_t>(left_ms, 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (o.cancel != nullptr && fds[i].fd == o.cancel->fd()) continue;  // seen at the top of the loop
      if (fds[i].fd == in_w) {
        const ssize_t w = write(in_w, stdin_bytes.data() + written, stdin_bytes.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) written = stdin_bytes.size();  // child closed stdin
        if (written == stdin_bytes.size()) {
          close(in_w);
          in_open = false;
        }
        continue;
      }
      const ssize_t r = read(fds[i].fd, buf, sizeof(buf));
      if (r <= 0) {
        (fds[i].fd == out_r ? out_open : err_open) = false;
        continue;
      }
      if (fds[i].fd == out_r) {
        if (res.out.size() < o.max_stdout_bytes) res.out.append(buf, static_cast<size_t>(r));
      } else {
        res.stderr_tail.append(buf, static_cast<size_t>(r));
        if (res.stderr_tail.size() > 2 * o.stderr_tail_bytes) {
          res.stderr_tail.erase(0, res.stderr_tail.size() - o.stderr_tail_bytes);
        }
      }
    }
  }
  if (in_open) close(in_w);
  close(out_r);
  close(err_r);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (res.stderr_tail.size() > o.stderr_tail_bytes) {
    res.stderr_tail.erase(0, res.stderr_tail.size() - o.stderr_tail_bytes);
  }
  if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
  res.success = !res.timed_out && !res.cancelled && WIFEXITED(status) && res.exit_code == 0;
  return res;
}

namespace {

uint32_t Le32(const std::string& b, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(b[at])) |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3])) << 24;
}

}  // namespace

PersistentChild::PersistentChild(ChildOptions options, int max_tasks)
    : options_(std::move(options)), max_tasks_(std::max(1, max_tasks)) {
  IgnoreSigpipe();
}

PersistentChild::~PersistentChild() { Stop(absl::Seconds(5), nullptr); }

absl::Status PersistentChild::Start() {
  if (options_.argv.empty()) return absl::InvalidArgumentError("argv: empty");
  tasks_ = 0;
  return Spawn(options_.argv, &pid_, &in_, &out_, &err_);
}

void PersistentChild::Stop(absl::Duration grace, ChildOutcome* o) {
  if (pid_ <= 0) return;
  if (in_ >= 0) close(in_);
  in_ = -1;
  int status = 0;
  const absl::Time deadline = absl::Now() + grace;
  pid_t r = 0;
  while ((r = waitpid(pid_, &status, WNOHANG)) == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  if (r == 0) {
    kill(-pid_, SIGKILL);
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  // Whatever the child started (compiler workers, say) goes with it.
  kill(-pid_, SIGKILL);
  if (o != nullptr) {
    if (WIFEXITED(status)) o->exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) o->signal = WTERMSIG(status);
  }
  if (out_ >= 0) close(out_);
  if (err_ >= 0) close(err_);
  pid_ = in_ = out_ = err_ = -1;
}

absl::StatusOr<ChildOutcome> PersistentChild::Run(const std::string& task_bytes, absl::Duration timeout,
                                                  const ChildCancel* cancel) {
  if (cancel != nullptr && cancel->cancelled()) {
    ChildOutcome res;
    res.cancelled = true;
    return res;
  }
  if (pid_ > 0 && tasks_ >= max_tasks_) Stop(absl::Seconds(5), nullptr);
  // A child that ended while idle (killed from outside, say) is replaced
  // before this task, which must not be blamed for it.
  if (pid_ > 0) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      kill(-pid_, SIGKILL);
      close(in_);
      close(out_);
      close(err_);
      pid_ = in_ = out_ = err_ = -1;
    }
  }
  if (pid_ <= 0) {
    if (absl::Status st = Start(); !st.ok()) return st;
  }
  ++tasks_;
  ChildOutcome res;
  const uint32_t n = static_cast<uint32_t>(task_bytes.size());
  std::string frame = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 24)};
  frame += task_bytes;
  size_t written = 0;
  std::string pending;  // stdout bytes not yet parsed into frames
  bool done = false, ended = false;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[65536];
  while (!done && !ended) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      res.timed_out = true;
      kill(-pid_, SIGKILL);
      break;
    }
    if (cancel != nullptr && cancel->cancelled()) {
      res.cancelled = true;
      kill(-pid_, SIGKILL);
      break;
    }
    pollfd fds[4];
    int k = 0;
    if (written < frame.size()) fds[k++] = {in_, POLLOUT, 0};
    fds[k++] = {out_, POLLIN, 0};
    fds[k++] = {err_, POLLIN, 0};
    if (cancel != nullptr && cancel->fd() >= 0) fds[k++] = {cancel->fd(), POLLIN, 0};
    if (poll(fds, k, static_cast<int>(std::min<int64_t>(left_ms, 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < k && !done && !ended; ++i) {
      if (fds[i].revents == 0) continue;
      if (cancel != nullptr && fds[i].fd == cancel->fd()) continue;  // seen at the top of the loop
      if (fds[i].fd == in_) {
        const ssize_t w = write(in_, frame.data() + written, frame.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) written = frame.size();  // the child is gone: its stdout says how
        continue;
      }
      const ssize_t r = read(fds[i].fd, buf, sizeof(buf));
      if (r <= 0) {
        ended = true;  // the child closed its output: it is ending
        continue;
      }
      if (fds[i].fd == err_) {
        res.stderr_tail.append(buf, static_cast<size_t>(r));
        if (res.stderr_tail.size() > 2 * options_.stderr_tail_bytes) {
          res.stderr_tail.erase(0, res.stderr_tail.size() - options_.stderr_tail_bytes);
        }
        continue;
      }
      pending.append(buf, static_cast<size_t>(r));
      while (pending.size() >= 4) {
        const uint32_t len = Le32(pending, 0);
        if (len == 0) {
          if (pending.size() < 8) break;
          res.exit_code = static_cast<int>(Le32(pending, 4));
          done = true;
          break;
        }
        if (pending.size() < 4 + static_cast<size_t>(len)) break;
        if (res.out.size() < options_.max_stdout_bytes) res.out.append(pending, 4, len);
        pending.erase(0, 4 + static_cast<size_t>(len));
      }
    }
  }
  if (done) {
    // What the child wrote to stderr before its end frame is already in the
    // pipe: it belongs to this task, not the next (bounded: a thread of the
    // child may go on writing).
    const int flags = fcntl(err_, F_GETFL);
    fcntl(err_, F_SETFL, flags | O_NONBLOCK);
    for (ssize_t r, total = 0; total < (1 << 20) && (r = read(err_, buf, sizeof(buf))) > 0; total += r) {
      res.stderr_tail.append(buf, static_cast<size_t>(r));
      if (res.stderr_tail.size() > 2 * options_.stderr_tail_bytes) {
        res.stderr_tail.erase(0, res.stderr_tail.size() - options_.stderr_tail_bytes);
      }
    }
    fcntl(err_, F_SETFL, flags);
  }
  if (res.stderr_tail.size() > options_.stderr_tail_bytes) {
    res.stderr_tail.erase(0, res.stderr_tail.size() - options_.stderr_tail_bytes);
  }
  if (done) {
    res.success = res.exit_code == 0;
    // A child that reported a failure, or must retire (its device faulted),
    // serves no further task.
    if (res.exit_code != 0) Stop(absl::Seconds(5), nullptr);
    return res;
  }
  // The child ended, or hung or was cancelled and killed, during the task:
  // reap it and say how; the next task starts a new one.
  Stop(res.timed_out || res.cancelled ? absl::ZeroDuration() : absl::Seconds(5), &res);
  return res;
}

}  // namespace worker
}  // namespace mxval
