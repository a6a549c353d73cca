// Coordinator benchmark (issue #4): the real gRPC coordinator on loopback with
// its SQLite store, and 8 worker threads that lease a task and report a
// result at once (a no-op kernel), so the coordinator is what is measured.
//   1. throughput: one job of --tasks tasks, submit to DONE, tasks/s
//   2. latency: --jobs one-task jobs in sequence, submit to result (WatchJob), p50/p99
//   3. memory: resident set before and after queueing --queued tasks (no workers)
// Usage: coordinator_bench [--tasks N] [--jobs N] [--queued N] [--workers N]
//            [--store sqlite|memory] [--pg-scratch CONNINFO [--coordinators N]]
// --pg-scratch runs phases 1 and 2 on PostgreSQL instead (the database is
// EMPTIED first: give it a scratch database), with N coordinators sharing it
// (workers spread round-robin over them; submits and watches go to the first).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include <libpq-fe.h>

#include "service/coordinator/coordinator_service.h"
#include "service/coordinator/postgres_store.h"
#include "service/coordinator/sqlite_store.h"

namespace mxval {
namespace {

int64_t RssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

v1::SubmitJobRequest Job(int tasks) {
  v1::SubmitJobRequest req;
  v1::Shape* s = req.mutable_spec()->add_shapes();
  s->set_op(v1::OP_CUSTOM);
  s->set_b(1);
  s->set_n(16);
  s->set_k(32);
  for (int m = 1; m <= tasks; ++m) req.mutable_spec()->add_m_values(m);
  return req;
}

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return c;
}

// Drops mxval's tables so each phase starts from an empty database.
bool EmptyPostgres(const std::string& conninfo) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  bool ok = PQstatus(c) == CONNECTION_OK;
  if (ok) {
    PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);
    PGresult* r = PQexec(c, "DROP TABLE IF EXISTS tasks, jobs, meta, libraries, schema_migrations");
    ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
  }
  if (!ok) fprintf(stderr, "coordinator_bench: --pg-scratch: %s\n", PQerrorMessage(c));
  PQfinish(c);
  return ok;
}

struct Server {
  std::unique_ptr<coordinator::Store> store;
  std::unique_ptr<coordinator::Scheduler> scheduler;
  std::unique_ptr<coordinator::Coordinator> coord;
  std::unique_ptr<grpc::Server> server;
  std::string addr;
  std::atomic<bool> stop{false};
  std::thread follower;  // shared store: Sync() every 100 ms, as `mxval serve` does
  // db: a SQLite path, "" for memory, or a PostgreSQL conninfo (pg).
  Server(const std::string& db, bool durable, bool pg = false) {
    if (pg) {
      store = std::move(*coordinator::PostgresStore::Open(db));
    } else if (durable) {
      for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
      store = std::move(*coordinator::SqliteStore::Open(db));
    }
    scheduler = std::move(*coordinator::Scheduler::Create(RealClock::Get(), coordinator::WithFailurePredicate(coordinator::SchedulerOptions{}), store.get()));
    coordinator::CoordinatorOptions o;
    o.planner.max_tasks_per_job = 1'000'000;
    coord = std::make_unique<coordinator::Coordinator>(RealClock::Get(), scheduler.get(), o);
    int port = 0;
    server = coordinator::StartServer("127.0.0.1:0", coord.get(), &port);
    addr = absl::StrCat("127.0.0.1:", port);
    if (pg) {
      follower = std::thread([this] {
        while (!stop) {
          (void)scheduler->Sync();
          scheduler->Tick();
          absl::SleepFor(absl::Milliseconds(100));
        }
      });
    }
  }
  ~Server() {
    stop = true;
    if (follower.joinable()) follower.join();
    server->Shutdown(std::chrono::system_clock::now());
  }
};

// No-op workers: lease, report a passing result, repeat until stopped.
std::vector<std::thread> StartWorkers(const std::vector<std::string>& addrs, int n, std::atomic<bool>* stop) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([addr = addrs[i % addrs.size()], i, stop] {
      auto stub = v1::WorkerService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
      v1::RegisterWorkerRequest reg;
      reg.set_worker_id(absl::StrCat("noop-", i));
      v1::DeviceInfo* d = reg.mutable_capabilities()->add_devices();
      d->set_arch("cpu");
      d->set_healthy(true);
      v1::RegisterWorkerResponse rr;
      (void)stub->RegisterWorker(Ctx().get(), reg, &rr);
      // As the worker daemon does: long-poll when idle, otherwise take the
      // next lease with each report (one RPC per task).
      v1::LeaseTaskResponse lease;
      while (!stop->load()) {
        if (!lease.has_task()) {
          v1::LeaseTaskRequest lr;
          lr.set_worker_id(reg.worker_id());
          lr.mutable_max_wait()->set_nanos(50'000'000);
          if (!stub->LeaseTask(Ctx().get(), lr, &lease).ok() || !lease.has_task()) continue;
        }
        v1::ReportResultRequest rep;
        rep.set_worker_id(reg.worker_id());
        rep.set_lease_id(lease.lease_id());
        rep.mutable_result()->set_task_id(lease.task().task_id());
        rep.mutable_result()->mutable_baseline()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
        rep.mutable_result()->mutable_candidate()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
        rep.mutable_next();
        v1::ReportResultResponse resp;
        lease.Clear();
        if (stub->ReportResult(Ctx().get(), rep, &resp).ok()) lease = resp.next();
      }
    });
  }
  return threads;
}

double Pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

int Main(int argc, char** argv) {
  int64_t tasks = 20000, jobs = 300, queued = 100000, workers = 8, coordinators = 1;
  bool durable = true;
  std::string pg;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--pg-scratch") {
      pg = argv[i + 1];
      continue;
    }
    if (k == "--coordinators" && absl::SimpleAtoi(argv[i + 1], &coordinators) && coordinators >= 1) continue;
    if (k == "--store") {  // sqlite (default) | memory: how much of the cost is the store
      durable = std::string(argv[i + 1]) != "memory";
      continue;
    }
    int64_t* dst = k == "--tasks" ? &tasks : k == "--jobs" ? &jobs : k == "--queued" ? &queued : k == "--workers" ? &workers : nullptr;
    if (dst == nullptr || !absl::SimpleAtoi(argv[i + 1], dst)) {
      fprintf(stderr, "usage: coordinator_bench [--tasks N] [--jobs N] [--queued N] [--workers N] [--store sqlite|memory]"
                      " [--pg-scratch CONNINFO [--coordinators N]]\n");
      return 2;
    }
  }
  const std::string dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  if (coordinators > 1 && pg.empty()) {
    fprintf(stderr, "coordinator_bench: --coordinators needs --pg-scratch (a shared store)\n");
    return 2;
  }
  if (!pg.empty() && !EmptyPostgres(pg)) return 2;
  {
    std::vector<std::unique_ptr<Server>> servers;
    std::vector<std::string> addrs;
    for (int i = 0; i < coordinators; ++i) {
      servers.push_back(std::make_unique<Server>(pg.empty() ? dir + "/mxval_bench_throughput.db" : pg, durable,
                                                 !pg.empty()));
      addrs.push_back(servers.back()->addr);
    }
    Server& s = *servers[0];
    std::atomic<bool> stop{false};
    auto threads = StartWorkers(addrs, static_cast<int>(workers), &stop);
    auto stub = v1::ValidationService::NewStub(grpc::CreateChannel(s.addr, grpc::InsecureChannelCredentials()));
    absl::SleepFor(absl::Milliseconds(200));  // workers registered and polling
    const absl::Time t0 = absl::Now();
    v1::SubmitJobResponse sub;
    if (!stub->SubmitJob(Ctx().get(), Job(static_cast<int>(tasks)), &sub).ok()) return 3;
    const absl::Time t_submitted = absl::Now();
    v1::GetJobRequest g;
    g.set_job_id(sub.job().job_id());
    v1::Job job;
    while (stub->GetJob(Ctx().get(), g, &job).ok() && job.state() != v1::JOB_STATE_DONE) absl::SleepFor(absl::Milliseconds(20));
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    printf("throughput (%s, %lld coordinator%s): %lld tasks, %lld no-op workers: %.0f tasks/s (submit+plan+store %.0f ms, total %.2f s)\n",
           !pg.empty() ? "postgresql" : durable ? "sqlite" : "memory", static_cast<long long>(coordinators),
           coordinators > 1 ? "s" : "", static_cast<long long>(tasks), static_cast<long long>(workers), tasks / secs,
           absl::ToDoubleMilliseconds(t_submitted - t0), secs);

    std::vector<double> lat;
    for (int j = 0; j < jobs; ++j) {
      const absl::Time a = absl::Now();
      if (!stub->SubmitJob(Ctx().get(), Job(1), &sub).ok()) return 3;
      v1::WatchJobRequest w;
      w.set_job_id(sub.job().job_id());
      auto ctx = Ctx();
      auto reader = stub->WatchJob(ctx.get(), w);
      v1::JobEvent ev;
      while (reader->Read(&ev)) {
        if (ev.has_result()) break;
      }
      ctx->TryCancel();
      (void)reader->Finish();
      lat.push_back(absl::ToDoubleMilliseconds(absl::Now() - a));
    }
    printf("submit-to-result, one-task jobs (n=%lld): p50 %.2f ms, p99 %.2f ms\n", static_cast<long long>(jobs),
           Pct(lat, 0.5), Pct(lat, 0.99));
    stop = true;
    for (auto& t : threads) t.join();
  }
  if (!pg.empty()) return 0;  // the memory phase measures the in-memory queue: SQLite only
  {
    Server s(dir + "/mxval_bench_memory.db", durable);
    const int64_t before = RssKiB();
    auto stub = v1::ValidationService::NewStub(grpc::CreateChannel(s.addr, grpc::InsecureChannelCredentials()));
    v1::SubmitJobResponse sub;
    int64_t left = queued;
    while (left > 0) {  // in jobs of up to 20,000 tasks
      const int n = static_cast<int>(std::min<int64_t>(left, 20000));
      if (!stub->SubmitJob(Ctx().get(), Job(n), &sub).ok()) return 3;
      left -= n;
    }
    const int64_t after = RssKiB();
    printf("memory: %lld queued tasks: RSS %.1f MiB -> %.1f MiB (+%.0f bytes per task)\n",
           static_cast<long long>(queued), before / 1024.0, after / 1024.0, (after - before) * 1024.0 / queued);
  }
  return 0;
}

}  // namespace
}  // namespace mxval

int main(int argc, char** argv) { return mxval::Main(argc, argv); }
