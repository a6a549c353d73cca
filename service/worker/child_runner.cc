#include "service/worker/child_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace mxval {
namespace worker {

std::string ChildOutcome::Describe() const {
  if (timed_out) return "timed out (process group killed)";
  if (signal != 0) return absl::StrCat("killed by signal ", signal, " (", strsignal(signal), ")");
  if (exit_code != 0) return absl::StrCat("exit code ", exit_code);
  return "exit code 0";
}

absl::StatusOr<ChildOutcome> RunChild(const ChildOptions& o, const std::string& stdin_bytes) {
  if (o.argv.empty()) return absl::InvalidArgumentError("argv: empty");
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
  posix_spawnattr_setpgroup(&attr, 0);  // own process group: a timeout kills its children too
  std::vector<char*> argv;
  for (const std::string& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    close(err[0]);
    return absl::InternalError(absl::StrCat("spawn ", o.argv[0], ": ", strerror(rc)));
  }
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  ChildOutcome res;
  size_t written = 0;
  bool in_open = true, out_open = true, err_open = true;
  if (stdin_bytes.empty()) {
    close(in[1]);
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
    pollfd fds[3];
    int n = 0;
    if (in_open) fds[n++] = {in[1], POLLOUT, 0};
    if (out_open) fds[n++] = {out[0], POLLIN, 0};
    if (err_open) fds[n++] = {err[0], POLLIN, 0};
    if (poll(fds, n, static_cast<int>(std::min<int64_t>(left_ms, 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in[1]) {
        const ssize_t w = write(in[1], stdin_bytes.data() + written, stdin_bytes.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) written = stdin_bytes.size();  // child closed stdin
        if (written == stdin_bytes.size()) {
          close(in[1]);
          in_open = false;
        }
        continue;
      }
      const ssize_t r = read(fds[i].fd, buf, sizeof(buf));
      if (r <= 0) {
        (fds[i].fd == out[0] ? out_open : err_open) = false;
        continue;
      }
      if (fds[i].fd == out[0]) {
        if (res.out.size() < o.max_stdout_bytes) res.out.append(buf, static_cast<size_t>(r));
      } else {
        res.stderr_tail.append(buf, static_cast<size_t>(r));
        if (res.stderr_tail.size() > 2 * o.stderr_tail_bytes) {
          res.stderr_tail.erase(0, res.stderr_tail.size() - o.stderr_tail_bytes);
        }
      }
    }
  }
  if (in_open) close(in[1]);
  close(out[0]);
  close(err[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (res.stderr_tail.size() > o.stderr_tail_bytes) {
    res.stderr_tail.erase(0, res.stderr_tail.size() - o.stderr_tail_bytes);
  }
  if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
  res.success = !res.timed_out && WIFEXITED(status) && res.exit_code == 0;
  return res;
}

}  // namespace worker
}  // namespace mxval
