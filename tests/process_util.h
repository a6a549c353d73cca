// Helpers for tests that run mxval as separate processes on loopback:
// spawning with output to files, private temp directories, waiting for the
// printed port, running CLI commands, and a plain HTTP GET for /metrics.
#ifndef MXVAL_TESTS_PROCESS_UTIL_H_
#define MXVAL_TESTS_PROCESS_UTIL_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mxval/v1/mxval.grpc.pb.h"

extern char** environ;

namespace mxval {
namespace testing_util {

// A child process with stdout redirected to a file.
struct Proc {
  pid_t pid = -1;
  std::string out_path;
  static Proc Start(std::vector<std::string> argv, const std::string& out_path) {
    Proc p;
    p.out_path = out_path;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, (out_path + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&p.pid, args[0], &fa, nullptr, args.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    return p;
  }
  void Kill(int sig) {
    if (pid > 0) kill(pid, sig);
  }
  int Wait() {
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    pid = -1;
    return status;
  }
};

// A directory of this process's own: concurrent test runs on one machine
// (two ctest invocations) must never share a database file.
// Whether process `pid` exists and is not a zombie (/proc/PID/stat's state).
inline bool ProcessAlive(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

inline std::string PrivateDir() {
  const std::string d = ::testing::TempDir() + "/mxval_integration_" + std::to_string(getpid()) + "_" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name();
  mkdir(d.c_str(), 0700);
  return d;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline int WaitForPort(const std::string& out_path) {
  for (int i = 0; i < 600; ++i) {  // bounded: 60 s
    const std::string s = ReadFile(out_path);
    const size_t colon = s.rfind(':');
    int port = 0;
    if (s.find("listening on") != std::string::npos && colon != std::string::npos &&
        absl::SimpleAtoi(s.substr(colon + 1, s.find('\n', colon) - colon - 1), &port)) {
      return port;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return 0;
}

inline std::unique_ptr<grpc::ClientContext> Ctx() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return c;
}

// Polls GetJob (with results) until the job is DONE or `bound` passes; the
// last answer either way. The bound is generous: under ASan, with other
// heavy tests beside it on two cores, a 300-task job took over 3 minutes.
inline v1::Job WaitForDone(v1::ValidationService::Stub* stub, const std::string& job_id,
                           absl::Duration bound = absl::Minutes(10)) {
  v1::Job job;
  const absl::Time end = absl::Now() + bound;
  while (absl::Now() < end) {
    v1::GetJobRequest g;
    g.set_job_id(job_id);
    g.set_include_results(true);
    if (stub->GetJob(Ctx().get(), g, &job).ok() && job.state() == v1::JOB_STATE_DONE) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return job;
}

struct CmdResult {
  int code;
  std::string out;
};

inline CmdResult Cmd(const std::string& cmd) {
  CmdResult r{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The first port printed after `marker` ("metrics on 127.0.0.1:") in a file, 0 if none within 60 s.
inline int WaitForMarkerPort(const std::string& path, const std::string& marker) {
  for (int i = 0; i < 600; ++i) {
    const std::string s = ReadFile(path);
    const size_t at = s.find(marker);
    int port = 0;
    if (at != std::string::npos) {
      const size_t b = at + marker.size(), e = s.find_first_not_of("0123456789", b);
      if (e != std::string::npos && e > b && absl::SimpleAtoi(s.substr(b, e - b), &port)) return port;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return 0;
}

// GET http://127.0.0.1:port/path; the body, or "" on any error.
inline std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string resp;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, n);
    }
  }
  close(fd);
  const size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// The value of the first sample line that starts with `series` (name and labels exactly), or -1.
inline double MetricValue(const std::string& text, const std::string& series) {
  size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      double v;
      const size_t b = at + series.size() + 1, e = text.find('\n', b);
      if (absl::SimpleAtod(text.substr(b, e - b), &v)) return v;
    }
    at += series.size();
  }
  return -1;
}

}  // namespace testing_util
}  // namespace mxval

#endif  // MXVAL_TESTS_PROCESS_UTIL_H_
