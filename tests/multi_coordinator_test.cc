// Two coordinators on one PostgreSQL database, as separate processes on
// loopback: `mxval serve --db postgresql://...` twice, two `mxval worker`
// daemons on each, one job submitted through the first. Mid-job one worker
// and then the first coordinator are SIGKILLed (its leases expire and the
// other coordinator re-queues them; it comes back on the same port). Both
// coordinators then report the same finished job, and the database holds
// every result exactly once: one successful attempt per task.
#include <libpq-fe.h>
#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mxval/v1/mxval.grpc.pb.h"
#include "tests/pg_server.h"
#include "tests/process_util.h"

namespace mxval {
namespace {

using testing_util::Ctx;
using testing_util::PrivateDir;
using testing_util::Proc;
using testing_util::ReadFile;
using testing_util::WaitForPort;

std::unique_ptr<v1::ValidationService::Stub> Stub(int port) {
  return v1::ValidationService::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
}

int DoneCount(v1::ValidationService::Stub* s, const std::string& job_id) {
  v1::GetJobRequest g;
  g.set_job_id(job_id);
  v1::Job job;
  return s->GetJob(Ctx().get(), g, &job).ok() ? job.progress().tasks_done() : -1;
}

TEST(MultiCoordinator, TwoCoordinatorsOnOneDatabaseRecordEveryResultOnce) {
  auto db = testing_util::PgServer::FreshDatabase();
  ASSERT_TRUE(db.ok()) << db.status();
  const std::string dir = PrivateDir();
  auto serve = [&](const std::string& listen, const std::string& name) {
    return Proc::Start({MXVAL_BIN, "serve", "--listen", listen, "--db", *db, "--lease-seconds", "3"},
                       dir + "/" + name + ".out");
  };
  Proc a = serve("127.0.0.1:0", "coord-a");
  Proc b = serve("127.0.0.1:0", "coord-b");
  const int port_a = WaitForPort(a.out_path), port_b = WaitForPort(b.out_path);
  ASSERT_GT(port_a, 0) << ReadFile(a.out_path + ".err");
  ASSERT_GT(port_b, 0) << ReadFile(b.out_path + ".err");
  EXPECT_NE(ReadFile(a.out_path + ".err").find("state in PostgreSQL 127.0.0.1"), std::string::npos);
  std::vector<Proc> workers;
  for (int i = 0; i < 4; ++i) {
    const int port = i < 2 ? port_a : port_b;
    workers.push_back(Proc::Start({MXVAL_BIN, "worker", "--coordinator", absl::StrCat("127.0.0.1:", port), "--id",
                                   absl::StrCat(i < 2 ? "wa" : "wb", i)},
                                  absl::StrCat(dir, "/worker", i, ".out")));
  }
  v1::SubmitJobRequest req;
  req.set_request_id("shared-db-1");
  req.mutable_spec()->set_name("two coordinators");
  req.mutable_spec()->add_presets("dsv3-tp8");
  req.mutable_spec()->add_presets("glm5-tp4");
  req.mutable_spec()->set_no_layout_probes(true);
  for (int m = 1; m <= 40; ++m) req.mutable_spec()->add_m_values(m);  // 4 shapes x 40 = 160 tasks
  req.mutable_spec()->set_repetitions(1);
  auto stub_a = Stub(port_a), stub_b = Stub(port_b);
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(stub_a->SubmitJob(Ctx().get(), req, &sub).ok());
  const int total = sub.job().progress().tasks_total();
  ASSERT_EQ(total, 160);
  const std::string job_id = sub.job().job_id();
  // The same request through the other coordinator is the same job.
  v1::SubmitJobResponse again;
  ASSERT_TRUE(stub_b->SubmitJob(Ctx().get(), req, &again).ok());
  EXPECT_EQ(again.job().job_id(), job_id);

  // Work lands through both; then a worker of b dies, and later coordinator a.
  for (int i = 0; i < 600 && DoneCount(stub_b.get(), job_id) < 20; ++i) absl::SleepFor(absl::Milliseconds(100));
  workers[3].Kill(SIGKILL);
  workers[3].Wait();
  for (int i = 0; i < 600 && DoneCount(stub_b.get(), job_id) < 60; ++i) absl::SleepFor(absl::Milliseconds(100));
  const int before = DoneCount(stub_b.get(), job_id);
  a.Kill(SIGKILL);
  a.Wait();
  absl::SleepFor(absl::Seconds(4));  // past the lease: b re-queues what a's workers held
  a = serve(absl::StrCat("127.0.0.1:", port_a), "coord-a2");
  ASSERT_EQ(WaitForPort(a.out_path), port_a) << ReadFile(a.out_path + ".err");
  stub_a = Stub(port_a);
  EXPECT_GE(DoneCount(stub_a.get(), job_id), before);  // nothing accepted was lost

  std::map<std::string, v1::Job> seen;
  for (const auto& [name, stub] : {std::pair<const char*, v1::ValidationService::Stub*>{"a", stub_a.get()},
                             {"b", stub_b.get()}}) {
    const v1::Job job = testing_util::WaitForDone(stub, job_id);
    ASSERT_EQ(job.state(), v1::JOB_STATE_DONE) << "coordinator " << name;
    seen[name] = job;
  }
  int retried = 0;
  std::map<std::string, int> by_pool;  // results reported through a's workers and b's
  for (const auto& [name, job] : seen) {
    ASSERT_EQ(job.results_size(), total) << name;
    std::set<std::string> ids;
    for (const v1::TaskResult& r : job.results()) {
      EXPECT_TRUE(ids.insert(r.task_id()).second) << name << ": duplicate result for " << r.task_id();
      EXPECT_EQ(r.baseline().accuracy().verdict(), v1::VERDICT_PASS) << r.task_id();
      EXPECT_EQ(r.candidate().accuracy().verdict(), v1::VERDICT_PASS) << r.task_id();
      if (name == "a") {
        retried += r.attempts_size() > 1;
        if (r.attempts_size() > 0) ++by_pool[r.attempts(r.attempts_size() - 1).worker_id().substr(0, 2)];
      }
    }
    EXPECT_EQ(job.progress().tasks_failed(), 0) << name;
  }
  EXPECT_GT(by_pool["wa"], 0);
  EXPECT_GT(by_pool["wb"], 0);
  // The database itself: every task DONE with a result and exactly one
  // attempt that was not an infrastructure failure (the one that reported).
  PGconn* c = PQconnectdb(db->c_str());
  ASSERT_EQ(PQstatus(c), CONNECTION_OK);
  const std::string sql = absl::StrCat(
      "SELECT count(*), count(*) FILTER (WHERE state = 2 AND has_result),"
      " count(*) FILTER (WHERE (SELECT count(*) FROM json_array_elements(attempts::json) e"
      "                         WHERE NOT (e->>'i')::boolean) = 1),"
      " count(DISTINCT task_id) FROM tasks WHERE job_id = '", job_id, "'");
  PGresult* r = PQexec(c, sql.c_str());
  ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQresultErrorMessage(r);
  for (int col = 0; col < 4; ++col) EXPECT_EQ(std::string(PQgetvalue(r, 0, col)), std::to_string(total)) << col;
  PQclear(r);
  r = PQexec(c, "SELECT count(*) FROM jobs");
  EXPECT_EQ(std::string(PQgetvalue(r, 0, 0)), "1");  // the retried submit added nothing
  PQclear(r);
  PQfinish(c);
  printf("multi-coordinator: %d tasks, %d done before coordinator a was killed, %d retried; last attempt on a's "
         "workers %d, on b's %d\n", total, before, retried, by_pool["wa"], by_pool["wb"]);
  for (size_t i = 0; i < 3; ++i) workers[i].Kill(SIGTERM);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(WIFEXITED(workers[i].Wait()));
  for (Proc* p : {&a, &b}) {
    p->Kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(p->Wait()));
  }
}

}  // namespace
}  // namespace mxval
