// The service as separate processes on loopback: `mxval serve` on a SQLite
// file, three `mxval worker` daemons, a 300-task job. A worker is SIGKILLed
// mid-job and the coordinator is SIGKILLed and restarted on the same file and
// port; afterwards every task has exactly one recorded, passing result.
#include <sys/stat.h>
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mxval/v1/mxval.grpc.pb.h"

extern char** environ;

namespace mxval {
namespace {

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
std::string PrivateDir() {
  const std::string d = ::testing::TempDir() + "/mxval_integration_" + std::to_string(getpid()) + "_" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name();
  mkdir(d.c_str(), 0700);
  return d;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

int WaitForPort(const std::string& out_path) {
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

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return c;
}

TEST(ServiceIntegration, ThreeHundredTasksSurviveWorkerAndCoordinatorKills) {
  const std::string dir = PrivateDir();
  const std::string db = dir + "/mxval_integration.db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  Proc coord = Proc::Start({MXVAL_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--lease-seconds", "3"},
                           dir + "/coord.out");
  const int port = WaitForPort(coord.out_path);
  ASSERT_GT(port, 0) << ReadFile(coord.out_path + ".err");
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  std::vector<Proc> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(Proc::Start({MXVAL_BIN, "worker", "--coordinator", addr, "--id", absl::StrCat("w", i)},
                                  absl::StrCat(dir, "/worker", i, ".out")));
  }
  auto stub = v1::ValidationService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest req;
  req.set_request_id("integration-300");
  req.mutable_spec()->set_name("integration");
  req.mutable_spec()->add_presets("dsv3-tp8");
  req.mutable_spec()->add_presets("glm5-tp4");
  for (int m = 1; m <= 75; ++m) req.mutable_spec()->add_m_values(m);  // 4 shapes x 75 = 300 tasks
  req.mutable_spec()->set_repetitions(1);
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(stub->SubmitJob(Ctx().get(), req, &sub).ok());
  ASSERT_EQ(sub.job().progress().tasks_total(), 300);
  const std::string job_id = sub.job().job_id();

  auto done_count = [&](v1::ValidationService::Stub* s) {
    v1::GetJobRequest g;
    g.set_job_id(job_id);
    v1::Job job;
    return s->GetJob(Ctx().get(), g, &job).ok() ? job.progress().tasks_done() : -1;
  };
  // Once some work has landed, kill a worker outright.
  for (int i = 0; i < 600 && done_count(stub.get()) < 20; ++i) absl::SleepFor(absl::Milliseconds(100));
  workers[0].Kill(SIGKILL);
  workers[0].Wait();
  // Later, kill the coordinator and bring it back on the same file and port.
  for (int i = 0; i < 600 && done_count(stub.get()) < 80; ++i) absl::SleepFor(absl::Milliseconds(100));
  const int before = done_count(stub.get());
  coord.Kill(SIGKILL);
  coord.Wait();
  coord = Proc::Start({MXVAL_BIN, "serve", "--listen", addr, "--db", db, "--lease-seconds", "3"}, dir + "/coord2.out");
  ASSERT_EQ(WaitForPort(coord.out_path), port) << ReadFile(coord.out_path + ".err");
  stub = v1::ValidationService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  EXPECT_GE(done_count(stub.get()), before);  // nothing accepted was lost
  // A retried submit after the restart is the same job.
  v1::SubmitJobResponse again;
  ASSERT_TRUE(stub->SubmitJob(Ctx().get(), req, &again).ok());
  EXPECT_EQ(again.job().job_id(), job_id);

  v1::Job job;
  for (int i = 0; i < 1800; ++i) {  // bounded: 3 minutes
    v1::GetJobRequest g;
    g.set_job_id(job_id);
    g.set_include_results(true);
    if (stub->GetJob(Ctx().get(), g, &job).ok() && job.state() == v1::JOB_STATE_DONE) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(job.state(), v1::JOB_STATE_DONE);
  ASSERT_EQ(job.results_size(), 300);
  std::set<std::string> ids;
  int retried = 0;
  for (const v1::TaskResult& r : job.results()) {
    EXPECT_TRUE(ids.insert(r.task_id()).second) << "duplicate result for " << r.task_id();
    EXPECT_EQ(r.baseline().accuracy().verdict(), v1::VERDICT_PASS) << r.task_id() << " " << r.baseline().accuracy().reason();
    EXPECT_EQ(r.candidate().accuracy().verdict(), v1::VERDICT_PASS) << r.task_id();
    retried += r.attempts_size() > 1;
  }
  EXPECT_EQ(ids.size(), 300u);
  EXPECT_EQ(job.progress().tasks_failed(), 0);
  printf("integration: 300 tasks, %d retried after the kills, %d done before the coordinator restart\n", retried, before);
  for (size_t i = 1; i < workers.size(); ++i) {
    workers[i].Kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(workers[i].Wait()));  // drained and exited
  }
  coord.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(coord.Wait()));
}

struct CmdResult {
  int code;
  std::string out;
};

CmdResult Cmd(const std::string& cmd) {
  CmdResult r{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(ServiceIntegration, CliVerbsAgainstAnEmbeddedServer) {
  const std::string dir = PrivateDir();
  const std::string db = dir + "/mxval_cli.db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  Proc serve = Proc::Start({MXVAL_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--workers", "2"}, dir + "/serve.out");
  const int port = WaitForPort(serve.out_path);
  ASSERT_GT(port, 0) << ReadFile(serve.out_path + ".err");
  const std::string bin = MXVAL_BIN;
  const std::string c = absl::StrCat(" --coordinator 127.0.0.1:", port);
  CmdResult r = Cmd(bin + " submit" + c + " --preset dsv3-tp8 --m 1,2 --request-id cli-1 --wait --format junit");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("<testsuite name=\"mxval job-1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tests=\"4\" failures=\"0\" errors=\"0\""), std::string::npos) << r.out;
  r = Cmd(bin + " get" + c + " --job job-1 --format markdown");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| vup B=16 N=128 K=512 | 2 | cpu |"), std::string::npos) << r.out;
  r = Cmd(bin + " jobs" + c);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("JOB_STATE_DONE"), std::string::npos) << r.out;
  r = Cmd(bin + " workers" + c);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("WORKER_STATE_ACTIVE"), std::string::npos) << r.out;
  r = Cmd(bin + " get" + c + " --job job-999");
  EXPECT_EQ(r.code, 2) << r.out;  // NOT_FOUND
  std::ofstream(dir + "/bad.json") << R"({"shapes": [{"op": "OP_KUP", "b": 16, "n": 512, "k": 100}], "mValues": [4]})";
  r = Cmd(bin + " submit" + c + " --spec " + dir + "/bad.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("spec.shapes[0].k"), std::string::npos) << r.out;
  r = Cmd(bin + " drain" + c + " --worker nobody");
  EXPECT_EQ(r.code, 2) << r.out;
  serve.Kill(SIGTERM);
  const int status = serve.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(serve.out_path + ".err");
}

}  // namespace
}  // namespace mxval
