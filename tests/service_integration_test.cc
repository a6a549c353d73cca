// The service as separate processes on loopback: `mxval serve` on a SQLite
// file, three `mxval worker` daemons, a 300-task job. A worker is SIGKILLed
// mid-job and the coordinator is SIGKILLed and restarted on the same file and
// port; afterwards every task has exactly one recorded, passing result.
#include <sqlite3.h>
#include <sys/stat.h>
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mxval/v1/mxval.grpc.pb.h"
#include "tests/process_util.h"

namespace mxval {
namespace {

using testing_util::Cmd;
using testing_util::CmdResult;
using testing_util::Ctx;
using testing_util::PrivateDir;
using testing_util::Proc;
using testing_util::ReadFile;
using testing_util::WaitForPort;

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
  req.mutable_spec()->set_no_layout_probes(true);
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

  const v1::Job job = testing_util::WaitForDone(stub.get(), job_id);
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
  // 2 shapes x 2 M, and a K-strided x probe of each shape at M = 1, all passing.
  EXPECT_NE(r.out.find("tests=\"6\" failures=\"0\" errors=\"0\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("classname=\"vup.B16.N128.K512.xKStrided\" name=\"M=1 cpu\""), std::string::npos) << r.out;
  r = Cmd(bin + " get" + c + " --job job-1 --format markdown");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| vup B=16 N=128 K=512 | 2 | cpu |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| kup B=16 N=512 K=128 x:k-strided | 1 | cpu |"), std::string::npos) << r.out;
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

// An external kernel library end to end with the CLI: an admin registers it
// (digest computed by `mxval register-library`), a job names it, the worker
// loads it from its --kernel-dir; after the file is swapped for another
// build, the worker refuses to load it and the candidate is an ERROR.
TEST(ServiceIntegration, RegisteredLibraryRunsOnlyWithItsDigest) {
  const std::string dir = PrivateDir();
  const std::string kernels = dir + "/kernels";
  mkdir(kernels.c_str(), 0700);
  ASSERT_EQ(std::system(("cp " MXVAL_PLUGIN_DIR "/libexample_plugin.so " + kernels + "/").c_str()), 0);
  const std::string db = dir + "/mxval_libs.db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  Proc serve = Proc::Start({MXVAL_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--workers", "1", "--kernel-dir",
                            kernels, "--library-cache", dir + "/cache"},
                           dir + "/serve.out");
  const int port = WaitForPort(serve.out_path);
  ASSERT_GT(port, 0) << ReadFile(serve.out_path + ".err");
  const std::string bin = MXVAL_BIN;
  const std::string c = absl::StrCat(" --coordinator 127.0.0.1:", port);
  std::ofstream(dir + "/job.json") << R"({"name": "lib-e2e", "presets": ["dsv3-tp8"], "mValues": [1, 3], "repetitions": 1,
      "candidateKernel": {"library": "example_plugin", "kernel": "example_naive", "buildId": "example-1"}})";
  // Not registered yet: refused naming the field.
  CmdResult r = Cmd(bin + " submit" + c + " --spec " + dir + "/job.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("spec.candidate_kernel.library"), std::string::npos) << r.out;
  // Registered without its content (as before uploads): workers load it only from their --kernel-dir.
  r = Cmd(bin + " register-library" + c + " --file " + kernels + "/libexample_plugin.so --no-upload");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("registered example_plugin build example-1 sha256 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("content: not uploaded"), std::string::npos) << r.out;
  r = Cmd(bin + " libraries" + c);
  EXPECT_NE(r.out.find("example_plugin"), std::string::npos) << r.out;
  r = Cmd(bin + " register-library" + c + " --file " + dir + "/nonexistent/libx.so");
  EXPECT_EQ(r.code, 2) << r.out;
  r = Cmd(bin + " register-library" + c + " --file " + kernels + "/libexample_plugin.so --build-id other-1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("the library's table says 'example-1'"), std::string::npos) << r.out;
  // The registration read what the library declares (in a child): a kernel
  // it does not have, or an arch it does not run on, is refused at submit.
  std::ofstream(dir + "/bad_kernel.json") << R"({"name": "lib-e2e", "presets": ["dsv3-tp8"], "mValues": [1],
      "candidateKernel": {"library": "example_plugin", "kernel": "nope", "buildId": "example-1"}})";
  r = Cmd(bin + " submit" + c + " --spec " + dir + "/bad_kernel.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("spec.candidate_kernel.kernel"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("example_naive"), std::string::npos) << "names what it declares: " << r.out;
  std::ofstream(dir + "/bad_arch.json") << R"({"name": "lib-e2e", "presets": ["dsv3-tp8"], "mValues": [1],
      "targetArchs": ["sm_90a"], "candidateKernel": {"library": "example_plugin", "buildId": "example-1"}})";
  r = Cmd(bin + " submit" + c + " --spec " + dir + "/bad_arch.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("spec.target_archs[0]"), std::string::npos) << r.out;
  r = Cmd(bin + " submit" + c + " --spec " + dir + "/job.json --request-id lib-1 --wait --format json");
  EXPECT_EQ(r.code, 0) << r.out;
  // The plugin declares one config, none of the built-in table's: it runs
  // with its own (chosen on the worker by can_implement), also on the
  // K-strided x probes, which it handles.
  EXPECT_NE(r.out.find("\"dispatchEntry\": \"own configs of example_plugin\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"xLayout\": \"X_LAYOUT_K_STRIDED\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("VERDICT_ERROR"), std::string::npos) << r.out;
  // Swap the file for another build (new inode, as an install would): refused by the worker.
  ASSERT_EQ(std::system(("cp " MXVAL_PLUGIN_DIR "/libexample_plugin_wrong.so " + kernels + "/new.so && mv " + kernels +
                         "/new.so " + kernels + "/libexample_plugin.so")
                            .c_str()),
            0);
  r = Cmd(bin + " submit" + c + " --spec " + dir + "/job.json --request-id lib-2 --wait --format json");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("refusing to load it"), std::string::npos) << r.out;
  serve.Kill(SIGTERM);
  serve.Wait();
}

// Registering once is enough: `register-library` uploads the library, a
// worker whose --kernel-dir never had the file fetches it by digest from the
// coordinator into its --library-cache and the job passes; once the stored
// content is corrupted (a flipped byte in the SQLite file), a worker with an
// empty cache refuses what it fetches, caches nothing, and the task's
// candidate is an ERROR naming the library and both digests.
TEST(ServiceIntegration, AWorkerFetchesARegisteredLibraryByDigestAndRefusesATamperedOne) {
  const std::string dir = PrivateDir();
  const std::string empty_kernels = dir + "/no_kernels";
  mkdir(empty_kernels.c_str(), 0700);
  const std::string db = dir + "/mxval_fetch.db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  Proc serve = Proc::Start({MXVAL_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--max-library-mib", "64"},
                           dir + "/serve.out");
  const int port = WaitForPort(serve.out_path);
  ASSERT_GT(port, 0) << ReadFile(serve.out_path + ".err");
  const std::string bin = MXVAL_BIN;
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  const std::string c = " --coordinator " + addr;
  const std::string plugin = MXVAL_PLUGIN_DIR "/libexample_plugin.so";
  CmdResult r = Cmd(bin + " register-library" + c + " --file " + plugin);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("content: uploaded "), std::string::npos) << r.out;
  const std::string sha = r.out.substr(r.out.find("sha256 ") + 7, 64);
  // Registered again: the content is already stored, nothing is sent.
  r = Cmd(bin + " register-library" + c + " --file " + plugin);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("content: already stored"), std::string::npos) << r.out;

  std::ofstream(dir + "/job.json") << R"({"name": "fetch-e2e", "presets": ["dsv3-tp8"], "mValues": [1, 3], "repetitions": 1,
      "candidateKernel": {"library": "example_plugin", "kernel": "example_naive", "buildId": "example-1"}})";
  const std::string cache1 = dir + "/cache1";
  Proc worker = Proc::Start({MXVAL_BIN, "worker", "--coordinator", addr, "--id", "fetcher-1", "--kernel-dir",
                             empty_kernels, "--library-cache", cache1, "--python", "/nonexistent"},
                            dir + "/worker1.out");
  r = Cmd(bin + " submit" + c + " --spec " + dir + "/job.json --request-id fetch-1 --wait --format json");
  EXPECT_EQ(r.code, 0) << r.out << ReadFile(worker.out_path + ".err");
  EXPECT_EQ(r.out.find("VERDICT_ERROR"), std::string::npos) << r.out;
  struct stat st;
  EXPECT_EQ(stat((cache1 + "/" + sha + "/libexample_plugin.so").c_str(), &st), 0) << "fetched into the cache";
  worker.Kill(SIGTERM);
  worker.Wait();

  // Corrupt the stored content: one byte of its first chunk.
  {
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
    sqlite3_busy_timeout(h, 10000);
    const std::string sql = "UPDATE library_blob_chunks SET data = CAST(X'00' || substr(data, 2) AS BLOB) WHERE blob_key = '" +
                            sha + "' AND idx = 0";
    EXPECT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(h);
    EXPECT_EQ(sqlite3_changes(h), 1);
    sqlite3_close(h);
  }
  const std::string cache2 = dir + "/cache2";
  worker = Proc::Start({MXVAL_BIN, "worker", "--coordinator", addr, "--id", "fetcher-2", "--kernel-dir", empty_kernels,
                        "--library-cache", cache2, "--python", "/nonexistent"},
                       dir + "/worker2.out");
  r = Cmd(bin + " submit" + c + " --spec " + dir + "/job.json --request-id fetch-2 --wait --format json");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("VERDICT_ERROR"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("library 'example_plugin': the content fetched from the coordinator has SHA-256 "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("the task's registration says " + sha + "; refused, not cached"), std::string::npos) << r.out;
  EXPECT_NE(stat((cache2 + "/" + sha).c_str(), &st), 0) << "nothing cached";
  worker.Kill(SIGTERM);
  worker.Wait();

  serve.Kill(SIGTERM);
  serve.Wait();
}

// Every listener can have TLS: gRPC (auth_test), and the metrics and web
// listeners, which get HTTPS from a TLS front once serve has --tls-cert (or
// --http-tls-cert); plaintext HTTP off loopback is refused unless explicitly
// allowed, for serve and workers, before anything starts.
TEST(ServiceIntegration, HttpListenersGetTlsAndPlaintextStaysOnLoopback) {
  const std::string dir = PrivateDir();
  ASSERT_EQ(std::system(("bash " MXVAL_SOURCE_DIR "/scripts/gen_test_certs.sh " + dir + " >/dev/null").c_str()), 0);
  const std::string db = dir + "/mxval_http.db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  const std::string bin = MXVAL_BIN;
  CmdResult r = Cmd(bin + " serve --listen 127.0.0.1:0 --db " + db + " --metrics-listen 0.0.0.0:0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--metrics-listen 0.0.0.0:0 is not a loopback address"), std::string::npos) << r.out;
  r = Cmd(bin + " serve --listen 127.0.0.1:0 --db " + db + " --http-listen 0.0.0.0:0");
  EXPECT_EQ(r.code, 2) << r.out;
  r = Cmd(bin + " worker --coordinator 127.0.0.1:1 --metrics-listen 0.0.0.0:0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--insecure-allow-remote"), std::string::npos) << r.out;
  r = Cmd(bin + " serve --listen 127.0.0.1:0 --db " + db + " --metrics-listen 127.0.0.1:99999");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--metrics-listen: '127.0.0.1:99999' has a port above 65535"), std::string::npos) << r.out;
  // Addresses are parsed, not prefix-checked: civetweb would bind every entry of a list.
  for (const char* flag : {"--http-listen", "--metrics-listen", "--listen"}) {
    r = Cmd(bin + " serve --db " + db + " " + flag + " 127.0.0.1:0,0.0.0.0:0");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(std::string(flag) + ": '127.0.0.1:0,0.0.0.0:0' is a list"), std::string::npos) << r.out;
  }
  r = Cmd(bin + " worker --coordinator 127.0.0.1:1 --metrics-listen 127.0.0.1:0s");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--metrics-listen: '127.0.0.1:0s'"), std::string::npos) << r.out;
  r = Cmd(bin + " serve --listen 127.0.0.1:0 --db " + db + " --metrics-listen 127.0.0.1:0 --http-tls-cert " + dir +
          "/server.crt --http-tls-key " + dir + "/ca.key");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("key '" + dir + "/ca.key'"), std::string::npos) << r.out;
  // Worker ids are bound to certificates only through the auth config's authorizer.
  r = Cmd(bin + " serve --listen 127.0.0.1:0 --db " + db + " --tls-cert " + dir + "/server.crt --tls-key " + dir +
          "/server.key --tls-client-ca " + dir + "/ca.crt");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--tls-client-ca needs --auth-config"), std::string::npos) << r.out;

  // HTTPS on both HTTP listeners (the gRPC listener's certificate is reused).
  Proc serve = Proc::Start({MXVAL_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--tls-cert", dir + "/server.crt",
                            "--tls-key", dir + "/server.key", "--metrics-listen", "127.0.0.1:0", "--http-listen",
                            "127.0.0.1:0"},
                           dir + "/serve.out");
  const int grpc_port = WaitForPort(serve.out_path);
  const int metrics = testing_util::WaitForMarkerPort(serve.out_path, "metrics on 127.0.0.1:");
  const int web = testing_util::WaitForMarkerPort(serve.out_path, "web UI on https://127.0.0.1:");
  auto https_get = [&](int port, const std::string& path) {
    return Cmd(absl::StrCat("printf 'GET ", path, " HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' | ",
                            "openssl s_client -quiet -ign_eof -verify_return_error -CAfile ", dir,
                            "/ca.crt -connect 127.0.0.1:", port, " 2>/dev/null"));
  };
  if (grpc_port > 0 && metrics > 0 && web > 0) {
    r = https_get(metrics, "/metrics");
    EXPECT_NE(r.out.find("mxval_coordinator_jobs{state=\"queued\"}"), std::string::npos) << r.out;
    r = https_get(web, "/api/jobs");
    EXPECT_NE(r.out.find("200 OK"), std::string::npos) << r.out;
    // Plaintext HTTP on the HTTPS ports gets no page.
    EXPECT_EQ(testing_util::HttpGet(metrics, "/metrics").find("mxval_coordinator"), std::string::npos);
    EXPECT_EQ(testing_util::HttpGet(web, "/api/jobs").find("jobs"), std::string::npos);
  } else {
    ADD_FAILURE() << ReadFile(serve.out_path) << ReadFile(serve.out_path + ".err");
  }
  serve.Kill(SIGTERM);
  const int status = serve.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(serve.out_path + ".err");
}

// The CLI against `mxval serve` processes: a rate-limited submit exits 5
// (not 3, "unavailable"); a submit with a request id started while the
// coordinator is down rides out its restart on the same port and file.
TEST(ServiceIntegration, SubmitRidesOutACoordinatorRestartAndALimitExitsFive) {
  const std::string dir = PrivateDir();
  const std::string db = dir + "/mxval_restart.db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  struct Reaper {  // no coordinator outlives the test, whatever fails
    Proc* p;
    ~Reaper() {
      if (p->pid > 0) {
        p->Kill(SIGKILL);
        p->Wait();
      }
    }
  };
  Proc serve = Proc::Start({MXVAL_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--submit-rate-per-minute", "1"},
                           dir + "/serve.out");
  Reaper reaper{&serve};
  const int port = WaitForPort(serve.out_path);
  ASSERT_GT(port, 0) << ReadFile(serve.out_path + ".err");
  const std::string bin = MXVAL_BIN;
  const std::string c = absl::StrCat(" --coordinator 127.0.0.1:", port);
  CmdResult r = Cmd(bin + " submit" + c + " --preset dsv3-tp8 --m 1 --request-id first");
  EXPECT_EQ(r.code, 0) << r.out;
  r = Cmd(bin + " submit" + c + " --preset dsv3-tp8 --m 2");
  EXPECT_EQ(r.code, 5) << r.out;
  EXPECT_NE(r.out.find("retry later"), std::string::npos) << r.out;
  serve.Kill(SIGKILL);
  serve.Wait();
  Proc restarted;
  Reaper reaper2{&restarted};
  std::thread restart([&] {
    absl::SleepFor(absl::Seconds(1));  // the submit below starts while nothing listens
    restarted = Proc::Start({MXVAL_BIN, "serve", "--listen", absl::StrCat("127.0.0.1:", port), "--db", db},
                            dir + "/serve2.out");
  });
  r = Cmd(bin + " submit" + c + " --preset dsv3-tp8 --m 4 --request-id after-restart --retry-seconds 60");
  restart.join();
  EXPECT_EQ(r.code, 0) << r.out << ReadFile(dir + "/serve2.out.err");
  EXPECT_NE(r.out.find("retry 1 in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("submitted job-2"), std::string::npos) << r.out;
  // Without a request id the same outage is not retried.
  restarted.Kill(SIGKILL);
  restarted.Wait();
  r = Cmd(bin + " submit" + c + " --preset dsv3-tp8 --m 8");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("not retried: without --request-id"), std::string::npos) << r.out;
}

// `mxval drain` leaves the worker daemon up and idle: it finishes, leases
// nothing and keeps heartbeating (a queued job stays queued); `--undrain`
// puts it back to work; only SIGTERM ends it, with exit code 0.
TEST(ServiceIntegration, DrainedWorkerDaemonStaysUpUntilUndrainedAndSigtermExitsZero) {
  const std::string dir = PrivateDir();
  const std::string db = dir + "/mxval_drain.db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  Proc serve = Proc::Start({MXVAL_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--lease-seconds", "3"},
                           dir + "/serve.out");
  struct Reap {  // nothing outlives the test, whatever fails
    Proc* p;
    ~Reap() {
      if (p->pid > 0) {
        p->Kill(SIGKILL);
        p->Wait();
      }
    }
  } reap_serve{&serve};
  const int port = WaitForPort(serve.out_path);
  ASSERT_GT(port, 0) << ReadFile(serve.out_path + ".err");
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  Proc worker = Proc::Start({MXVAL_BIN, "worker", "--coordinator", addr, "--id", "drained-1"}, dir + "/worker.out");
  Reap reap_worker{&worker};
  auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  auto admin = v1::AdminService::NewStub(channel);
  auto client = v1::ValidationService::NewStub(channel);
  // The worker's last heartbeat as the coordinator saw it (0: not registered).
  auto last_heartbeat = [&] {
    v1::ListWorkersResponse lw;
    if (!admin->ListWorkers(Ctx().get(), v1::ListWorkersRequest(), &lw).ok()) return int64_t{0};
    for (const v1::WorkerStatus& w : lw.workers()) {
      if (w.worker_id() == "drained-1") return w.last_heartbeat().seconds() * 1000 + w.last_heartbeat().nanos() / 1000000;
    }
    return int64_t{0};
  };
  auto eventually = [](const std::function<bool()>& done) {
    const absl::Time until = absl::Now() + absl::Seconds(60);  // against a hang only
    while (!done()) {
      if (absl::Now() > until) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return true;
  };
  ASSERT_TRUE(eventually([&] { return last_heartbeat() > 0; })) << ReadFile(worker.out_path + ".err");
  EXPECT_NE(ReadFile(worker.out_path + ".err").find("heartbeat every 1s (lease 3s)"), std::string::npos)
      << ReadFile(worker.out_path + ".err");
  const std::string bin = MXVAL_BIN;
  CmdResult r = Cmd(bin + " drain --coordinator " + addr + " --worker drained-1");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_TRUE(eventually([&] { return ReadFile(worker.out_path + ".err").find("drained by the coordinator") != std::string::npos; }));
  r = Cmd(bin + " submit --coordinator " + addr + " --preset dsv3-tp8 --m 1");
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("submitted ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string job_id = r.out.substr(at + 10, r.out.find_first_of(" \n", at + 10) - (at + 10));
  // Two more heartbeats: the daemon is alive, and it leased nothing.
  int64_t seen = last_heartbeat();
  for (int beat = 0; beat < 2; ++beat) {
    ASSERT_TRUE(eventually([&] { return last_heartbeat() > seen; }));
    seen = last_heartbeat();
  }
  int status = 0;
  EXPECT_EQ(waitpid(worker.pid, &status, WNOHANG), 0) << "the drained worker exited";
  v1::GetJobRequest g;
  g.set_job_id(job_id);
  v1::Job job;
  ASSERT_TRUE(client->GetJob(Ctx().get(), g, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.progress().tasks_done(), 0);

  r = Cmd(bin + " drain --coordinator " + addr + " --worker drained-1 --undrain");
  ASSERT_EQ(r.code, 0) << r.out;
  job = testing_util::WaitForDone(client.get(), job_id, absl::Minutes(2));
  EXPECT_EQ(job.state(), v1::JOB_STATE_DONE);
  EXPECT_EQ(job.progress().tasks_failed(), 0);
  worker.Kill(SIGTERM);
  status = worker.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(worker.out_path + ".err");
  serve.Kill(SIGTERM);
  serve.Wait();
}

}  // namespace
}  // namespace mxval
