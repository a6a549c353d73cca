// Chaos: a 500-task job on `mxval serve` + four `mxval worker` processes
// while a driver SIGKILLs and restarts workers and the coordinator at random
// (seeded, bounded in count and time, loopback only). Afterwards:
//   - the job is DONE (nothing stuck) and every task has exactly one recorded
//     result: one result row per task, and exactly one successful attempt per
//     task that was not given up on after max_attempts infrastructure failures;
//   - the API, the SQLite file and the coordinator's metrics agree.
// The numbers (kills survived, tasks retried, attempts, time) are printed.
// MXVAL_CHAOS_SEED=<n> replays another schedule.
#include <signal.h>
#include <sqlite3.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "mxval/v1/mxval.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/process_util.h"

namespace mxval {
namespace {

using namespace testing_util;  // NOLINT: test helpers

constexpr int kWorkers = 4;
constexpr int kMaxWorkerKills = 14;
constexpr int kMaxCoordinatorKills = 4;
constexpr int kMaxAttempts = 3;  // the scheduler's default

struct Coordinator {
  Proc proc;
  int port = 0, metrics_port = 0;
};

TEST(Chaos, FiveHundredTasksSurviveRandomKillsOfWorkersAndTheCoordinator) {
  uint64_t seed = 20261130;
  if (const char* s = std::getenv("MXVAL_CHAOS_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::string dir = PrivateDir();
  const std::string db = dir + "/chaos.db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  int incarnation = 0;
  auto start_coordinator = [&](const std::string& listen) {
    Coordinator c;
    const std::string out = absl::StrCat(dir, "/coord", incarnation++, ".out");
    c.proc = Proc::Start({MXVAL_BIN, "serve", "--listen", listen, "--db", db, "--lease-seconds", "2", "--metrics-listen",
                          "127.0.0.1:0"},
                         out);
    c.port = WaitForPort(out);
    c.metrics_port = WaitForMarkerPort(out, "metrics on 127.0.0.1:");
    return c;
  };
  Coordinator coord = start_coordinator("127.0.0.1:0");
  ASSERT_GT(coord.port, 0) << ReadFile(dir + "/coord0.out.err");
  const std::string addr = absl::StrCat("127.0.0.1:", coord.port);
  std::vector<Proc> workers(kWorkers);
  std::vector<int> worker_starts(kWorkers, 0);
  auto start_worker = [&](int i) {
    workers[i] = Proc::Start({MXVAL_BIN, "worker", "--coordinator", addr, "--id", absl::StrCat("w", i)},
                             absl::StrCat(dir, "/worker", i, "_", worker_starts[i]++, ".out"));
  };
  for (int i = 0; i < kWorkers; ++i) start_worker(i);

  auto stub = [&] { return v1::ValidationService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials())); };
  v1::SubmitJobRequest req;
  req.set_request_id("chaos-500");
  req.mutable_spec()->set_name("chaos");
  req.mutable_spec()->add_presets("dsv3-tp8");
  req.mutable_spec()->add_presets("glm5-tp4");
  req.mutable_spec()->set_no_layout_probes(true);
  for (int m = 1; m <= 125; ++m) req.mutable_spec()->add_m_values(m);  // 4 shapes x 125 = 500 tasks
  req.mutable_spec()->set_repetitions(1);
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(stub()->SubmitJob(Ctx().get(), req, &sub).ok());
  ASSERT_EQ(sub.job().progress().tasks_total(), 500);
  const std::string job_id = sub.job().job_id();
  auto get = [&](bool results, v1::Job* job) {
    v1::GetJobRequest g;
    g.set_job_id(job_id);
    g.set_include_results(results);
    return stub()->GetJob(Ctx().get(), g, job).ok();
  };

  // The driver: random pauses, then kill a random worker (restarted at once
  // under the same id, as systemd would) or the coordinator (restarted on the
  // same file and port), until the budgets are spent or the job is done.
  const absl::Time t0 = absl::Now();
  const absl::Time deadline = t0 + absl::Minutes(6);  // bounded; a stuck job fails here
  int worker_kills = 0, coordinator_kills = 0, done_at_last_kill = 0;
  v1::Job job;
  while (absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(uniform(300, 1500)));
    if (get(false, &job) && job.state() == v1::JOB_STATE_DONE) break;
    if (uniform(0, 1) == 0) continue;  // about every other pause: the kills spread over the job
    const bool kill_coordinator = coordinator_kills < kMaxCoordinatorKills && uniform(0, 3) == 0;
    if (kill_coordinator) {
      coord.proc.Kill(SIGKILL);
      coord.proc.Wait();
      ++coordinator_kills;
      absl::SleepFor(absl::Milliseconds(uniform(0, 1000)));  // workers see it gone and retry
      coord = start_coordinator(addr);
      ASSERT_EQ(coord.port, std::stoi(addr.substr(addr.rfind(':') + 1)))
          << ReadFile(absl::StrCat(dir, "/coord", incarnation - 1, ".out.err"));
      done_at_last_kill = job.progress().tasks_done();
    } else if (worker_kills < kMaxWorkerKills) {
      const int i = uniform(0, kWorkers - 1);
      workers[i].Kill(SIGKILL);
      workers[i].Wait();
      ++worker_kills;
      absl::SleepFor(absl::Milliseconds(uniform(0, 500)));
      start_worker(i);
      done_at_last_kill = job.progress().tasks_done();
    }
  }
  // Budgets spent (or the job finished): wait for the end, still bounded.
  while (absl::Now() < deadline && !(get(false, &job) && job.state() == v1::JOB_STATE_DONE)) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  ASSERT_EQ(job.state(), v1::JOB_STATE_DONE) << "job stuck after " << seconds << " s: " << job.progress().DebugString();
  ASSERT_TRUE(get(true, &job));

  // Through the API: one result per task.
  ASSERT_EQ(job.results_size(), 500);
  std::set<std::string> ids;
  int retried = 0, attempts = 0, given_up = 0, passed = 0;
  for (const v1::TaskResult& r : job.results()) {
    EXPECT_TRUE(ids.insert(r.task_id()).second) << "duplicate result for " << r.task_id();
    attempts += r.attempts_size();
    retried += r.attempts_size() > 1;
    int ok_attempts = 0;
    for (const v1::Attempt& a : r.attempts()) ok_attempts += a.failure() == v1::FAILURE_CLASS_NONE;
    const bool infra_only = ok_attempts == 0;
    if (infra_only) {
      ++given_up;
      EXPECT_EQ(r.attempts_size(), kMaxAttempts) << r.task_id() << " given up before max_attempts";
    } else {
      EXPECT_EQ(ok_attempts, 1) << r.task_id() << ": a result recorded more than once";
      const bool pass = r.baseline().accuracy().verdict() == v1::VERDICT_PASS &&
                        r.candidate().accuracy().verdict() == v1::VERDICT_PASS;
      EXPECT_TRUE(pass) << r.task_id() << " " << r.candidate().accuracy().reason();
      passed += pass;
    }
  }
  EXPECT_EQ(ids.size(), 500u);

  // In the SQLite file: the same, read directly (the coordinator is still
  // running; WAL lets us read alongside it).
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(h, "SELECT task_id, state, has_result, infra_failed, attempts FROM tasks WHERE job_id = ?1",
                               -1, &st, nullptr),
            SQLITE_OK);
  sqlite3_bind_text(st, 1, job_id.c_str(), -1, SQLITE_TRANSIENT);
  int rows = 0, rows_done = 0, rows_with_result = 0, rows_infra = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    ++rows;
    const std::string id = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    rows_done += sqlite3_column_int(st, 1) == 2;  // TaskState::kDone
    const bool has_result = sqlite3_column_int(st, 2) != 0, infra = sqlite3_column_int(st, 3) != 0;
    rows_with_result += has_result;
    rows_infra += infra;
    EXPECT_NE(has_result, infra) << id << ": exactly one of a result and an infrastructure verdict";
    const auto at = nlohmann::json::parse(reinterpret_cast<const char*>(sqlite3_column_text(st, 4)), nullptr, false);
    int ok = 0;
    for (const auto& a : at) ok += !a.value("i", false);
    EXPECT_EQ(ok, has_result ? 1 : 0) << id;
    EXPECT_TRUE(ids.count(id)) << id << " in the store but not in the API";
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  EXPECT_EQ(rows, 500);
  EXPECT_EQ(rows_done, 500);
  EXPECT_EQ(rows_with_result, 500 - given_up);
  EXPECT_EQ(rows_infra, given_up);

  // The coordinator's metrics agree with the store (gauges refresh every 250 ms).
  std::string text;
  bool agree = false;
  for (int i = 0; i < 50 && !agree; ++i) {
    text = HttpGet(coord.metrics_port, "/metrics");
    agree = MetricValue(text, "mxval_coordinator_jobs{state=\"done\"}") == 1 &&
            MetricValue(text, "mxval_coordinator_jobs{state=\"running\"}") == 0 &&
            MetricValue(text, "mxval_coordinator_tasks{state=\"queued\"}") == 0 &&
            MetricValue(text, "mxval_coordinator_tasks{state=\"leased\"}") == 0;
    if (!agree) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(agree) << text;

  printf("chaos: seed %llu, %.1f s, %d worker kills and %d coordinator kills survived; 500 tasks, %d passed, %d given up "
         "after %d infrastructure failures, %d retried (%d attempts in all); %d done at the last kill\n",
         static_cast<unsigned long long>(seed), seconds, worker_kills, coordinator_kills, passed, given_up, kMaxAttempts,
         retried, attempts, done_at_last_kill);
  RecordProperty("worker_kills", worker_kills);
  RecordProperty("coordinator_kills", coordinator_kills);
  RecordProperty("tasks_retried", retried);
  EXPECT_GT(worker_kills + coordinator_kills, 0) << "the job finished before any kill: nothing was tested";

  for (Proc& w : workers) {
    w.Kill(SIGTERM);
    w.Wait();
  }
  coord.proc.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(coord.proc.Wait()));
}

}  // namespace
}  // namespace mxval
