// Metrics end to end: a coordinator and a worker (in this process, tasks in
// child processes) run a job; both registries are scraped over HTTP from
// prometheus-cpp exposers on 127.0.0.1:0; `promtool check metrics` must be
// clean on each scrape and the expected series must carry plausible values.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "prometheus/exposer.h"
#include "service/coordinator/coordinator_service.h"
#include "service/worker/worker.h"
#include "service/worker/worker_metrics.h"

namespace mxval {
namespace {

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  (void)!write(fd, req.data(), req.size());
  std::string resp;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// `promtool check metrics` on the text: returns its output ("" when clean) and exit code.
std::pair<int, std::string> Promtool(const std::string& text) {
  const std::string path = ::testing::TempDir() + "/mxval_scrape_" + std::to_string(getpid()) + ".txt";
  std::ofstream(path) << text;
  FILE* p = popen(("promtool check metrics < " + path + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

TEST(Metrics, ScrapesAreCleanAndPlausible) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "promtool missing (scripts/setup.sh installs it)";
  auto coord_registry = std::make_shared<prometheus::Registry>();
  auto worker_registry = std::make_shared<prometheus::Registry>();
  coordinator::CoordinatorMetrics cm(*coord_registry);
  worker::WorkerMetrics wm(*worker_registry);
  coordinator::Scheduler scheduler(RealClock::Get(), coordinator::WithFailurePredicate(coordinator::SchedulerOptions{}));
  coordinator::CoordinatorOptions co;
  co.max_long_poll = absl::Milliseconds(200);
  co.metrics = &cm;
  coordinator::Coordinator coord(RealClock::Get(), &scheduler, co);
  int port = 0;
  auto server = coordinator::StartServer("127.0.0.1:0", &coord, &port);
  ASSERT_NE(server, nullptr);
  worker::WorkerOptions wo;
  wo.coordinator = absl::StrCat("127.0.0.1:", port);
  wo.worker_id = "w1";
  wo.child_argv = {MXVAL_BIN, "__run-task", "--threads", "1"};
  wo.long_poll = absl::Milliseconds(200);
  wo.metrics = &wm;
  auto w = worker::Worker::Create(wo);
  ASSERT_TRUE(w.ok());
  std::thread t([&] { (void)(*w)->Run(); });

  v1::SubmitJobRequest req;
  req.mutable_spec()->add_presets("dsv3-tp8");
  req.mutable_spec()->set_no_layout_probes(true);
  req.mutable_spec()->add_m_values(1);
  req.mutable_spec()->add_m_values(33);
  req.mutable_spec()->set_repetitions(1);
  v1::SubmitJobResponse sub;
  grpc::ServerContext ctx;
  ASSERT_TRUE(coord.SubmitJob(&ctx, &req, &sub).ok());
  v1::SubmitJobRequest bad = req;
  bad.mutable_spec()->add_m_values(0);
  EXPECT_FALSE(coord.SubmitJob(&ctx, &bad, &sub).ok());
  for (int i = 0; i < 1200; ++i) {  // bounded wait
    auto job = coord.BuildJob("job-1", false);
    if (job.ok() && job->state() == v1::JOB_STATE_DONE) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  (*w)->Drain();
  t.join();
  v1::TriageLogsRequest logs;
  logs.add_changed_files("README.md");
  v1::CiJobLog* log = logs.add_jobs();
  log->set_name("unit-test");
  log->set_log("FAILED tests/test_a.py::test_b - AssertionError\n");
  v1::TriageLogsResponse triaged;
  ASSERT_TRUE(coord.TriageLogs(&ctx, &logs, &triaged).ok());
  coord.RefreshMetrics();

  prometheus::Exposer coord_exposer("127.0.0.1:0"), worker_exposer("127.0.0.1:0");
  coord_exposer.RegisterCollectable(coord_registry);
  worker_exposer.RegisterCollectable(worker_registry);
  const std::string cs = HttpGet(coord_exposer.GetListeningPorts().at(0), "/metrics");
  const std::string ws = HttpGet(worker_exposer.GetListeningPorts().at(0), "/metrics");
  for (const std::string* scrape : {&cs, &ws}) {
    auto [code, out] = Promtool(*scrape);
    EXPECT_EQ(code, 0) << out;
    EXPECT_EQ(out, "") << out;
  }
  EXPECT_NE(cs.find("mxval_coordinator_jobs_submitted_total 1"), std::string::npos) << cs;
  EXPECT_NE(cs.find("mxval_coordinator_jobs_rejected_total{reason=\"invalid\"} 1"), std::string::npos) << cs;
  EXPECT_NE(cs.find("mxval_coordinator_tasks_reported_total{outcome=\"pass\"} 4"), std::string::npos) << cs;
  EXPECT_NE(cs.find("mxval_coordinator_jobs{state=\"done\"} 1"), std::string::npos) << cs;
  EXPECT_NE(cs.find("mxval_coordinator_tasks{state=\"queued\"} 0"), std::string::npos) << cs;
  EXPECT_NE(cs.find("mxval_coordinator_task_run_seconds_count 4"), std::string::npos) << cs;
  EXPECT_NE(cs.find("mxval_coordinator_workers{arch=\"cpu\",state=\"active\"} 1"), std::string::npos) << cs;
  EXPECT_NE(cs.find("mxval_coordinator_triage_decisions_total{class=\"PASS\",signature=\"none\"} 4"),
            std::string::npos) << cs;
  EXPECT_NE(cs.find("mxval_coordinator_triage_decisions_total{class=\"UNTOUCHED_FAILURE\",signature=\"pytest-failure\"} 1"),
            std::string::npos) << cs;
  EXPECT_NE(cs.find("mxval_coordinator_triage_reruns_total 0"), std::string::npos) << cs;
  EXPECT_NE(ws.find("mxval_worker_tasks_total{outcome=\"pass\"} 4"), std::string::npos) << ws;
  EXPECT_NE(ws.find("mxval_worker_kernel_time_seconds_count{arch=\"cpu\",clock=\"unread\",kernel=\"a16wfp4_cpu\",launch=\"plain\",m_bucket=\"17-64\",side=\"candidate\"} 2"),
            std::string::npos)
      << ws;
  EXPECT_NE(ws.find("mxval_worker_device_healthy{arch=\"cpu\",device=\"0\"} 1"), std::string::npos) << ws;
  EXPECT_NE(ws.find("mxval_worker_kernel_runs_total{arch=\"cpu\",kernel=\"a16wfp4_cpu\",launch=\"plain\",side=\"baseline\",verdict=\"pass\"} 4"),
            std::string::npos) << ws;
  EXPECT_NE(ws.find("mxval_worker_child_crashes_total 0"), std::string::npos) << ws;
  server->Shutdown();
}

// A side launched with PDL lands in its own series (launch="pdl"), never
// averaged with the plain launches of the same kernel and M bucket.
TEST(Metrics, PdlLaunchesAreTheirOwnSeries) {
  prometheus::Registry registry;
  worker::WorkerMetrics m(registry);
  v1::TaskResult r;
  r.set_m(64);
  r.set_arch("sm_90a");
  for (v1::KernelRun* run : {r.mutable_baseline(), r.mutable_candidate()}) {
    run->mutable_kernel()->set_kernel("a16wfp4_wgmma_rs");
    run->mutable_timing()->set_median_us(3.5);
    run->mutable_timing()->set_tflops(40);
    run->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
  }
  r.mutable_candidate()->set_launch(v1::LAUNCH_MODE_PDL);
  m.TaskResult(r);
  int pdl = 0, plain = 0;
  for (const auto& family : registry.Collect()) {
    if (family.name != "mxval_worker_kernel_time_seconds" && family.name != "mxval_worker_kernel_runs_total") continue;
    for (const auto& metric : family.metric) {
      std::string launch, side;
      for (const auto& l : metric.label) {
        if (l.name == "launch") launch = l.value;
        if (l.name == "side") side = l.value;
      }
      EXPECT_EQ(launch, side == "candidate" ? "pdl" : "plain") << family.name;
      (launch == "pdl" ? pdl : plain)++;
    }
  }
  EXPECT_EQ(pdl, 2);
  EXPECT_EQ(plain, 2);
}

// A device task's roofline fraction per side, and its device's measured
// ceilings; a side without a fraction (CPU kernels, no roofline measured)
// adds no series.
TEST(Metrics, RooflineFractionAndDeviceCeilings) {
  prometheus::Registry registry;
  worker::WorkerMetrics m(registry);
  v1::TaskResult r;
  r.set_m(4096);
  r.set_arch("sm_90a");
  for (v1::KernelRun* run : {r.mutable_baseline(), r.mutable_candidate()}) {
    run->mutable_kernel()->set_kernel("a16wfp4_wgmma_rs");
    run->mutable_timing()->set_median_us(24.4);
  }
  r.mutable_candidate()->mutable_timing()->set_roofline_fraction(0.84);
  r.mutable_roofline()->set_copy_gbps(4120);
  r.mutable_roofline()->set_bf16_tflops(782);
  m.TaskResult(r);
  v1::TaskResult cpu;  // no roofline: no device series
  cpu.set_arch("cpu");
  cpu.mutable_baseline()->mutable_kernel()->set_kernel("a16wfp4_cpu");
  cpu.mutable_baseline()->mutable_timing()->set_median_us(900);
  m.TaskResult(cpu);
  std::map<std::string, std::vector<std::pair<std::string, double>>> seen;
  for (const auto& family : registry.Collect()) {
    for (const auto& metric : family.metric) {
      std::string labels;
      for (const auto& l : metric.label) labels += l.name + "=" + l.value + ",";
      seen[family.name].push_back({labels, metric.gauge.value});
    }
  }
  ASSERT_EQ(seen["mxval_worker_kernel_roofline_fraction"].size(), 1u);
  EXPECT_NE(seen["mxval_worker_kernel_roofline_fraction"][0].first.find("side=candidate"), std::string::npos);
  EXPECT_DOUBLE_EQ(seen["mxval_worker_kernel_roofline_fraction"][0].second, 0.84);
  ASSERT_EQ(seen["mxval_worker_device_copy_bytes_per_second"].size(), 1u);
  EXPECT_EQ(seen["mxval_worker_device_copy_bytes_per_second"][0].first, "arch=sm_90a,");
  EXPECT_DOUBLE_EQ(seen["mxval_worker_device_copy_bytes_per_second"][0].second, 4120e9);
  ASSERT_EQ(seen["mxval_worker_device_bf16_gemm_flops"].size(), 1u);
  EXPECT_DOUBLE_EQ(seen["mxval_worker_device_bf16_gemm_flops"][0].second, 782e12);
}

// One timing window per device task, counted by what its clock saw; the
// window's lowest SM clock goes into a histogram. CPU timings carry no
// clock and are not counted.
TEST(Metrics, TimingWindowsAreCountedByClockState) {
  prometheus::Registry registry;
  worker::WorkerMetrics m(registry);
  auto task = [](int lo, int hi, bool disturbed, int samples) {
    v1::TaskResult r;
    r.set_m(8192);
    r.set_arch("sm_90a");
    for (v1::KernelRun* run : {r.mutable_baseline(), r.mutable_candidate()}) {
      run->mutable_kernel()->set_kernel("a16wfp4_wgmma_rs");
      run->mutable_timing()->set_median_us(50);
      v1::ClockWindow* c = run->mutable_timing()->mutable_clock();
      c->set_samples(samples), c->set_sm_mhz_min(lo), c->set_sm_mhz_max(hi), c->set_disturbed(disturbed);
    }
    return r;
  };
  m.TaskResult(task(1980, 1980, false, 5));
  m.TaskResult(task(1980, 1980, false, 4));
  m.TaskResult(task(1500, 1980, true, 6));
  m.TaskResult(task(0, 0, false, 0));
  v1::TaskResult cpu;
  cpu.set_arch("cpu");
  cpu.mutable_baseline()->mutable_timing()->set_median_us(900);
  m.TaskResult(cpu);
  std::map<std::string, double> windows;
  double observed = 0, sum = 0;
  for (const auto& family : registry.Collect()) {
    for (const auto& metric : family.metric) {
      if (family.name == "mxval_worker_timing_windows_total") {
        std::string arch, clock;
        for (const auto& l : metric.label) (l.name == "arch" ? arch : clock) = l.value;
        EXPECT_EQ(arch, "sm_90a");
        windows[clock] = metric.counter.value;
      }
      if (family.name == "mxval_worker_timing_sm_clock_min_mhz") {
        observed = static_cast<double>(metric.histogram.sample_count);
        sum = metric.histogram.sample_sum;
      }
    }
  }
  EXPECT_EQ(windows, (std::map<std::string, double>{{"steady", 2}, {"disturbed", 1}, {"unread", 1}}));
  EXPECT_EQ(observed, 3);
  EXPECT_EQ(sum, 1980 + 1980 + 1500);
  // Kernel times carry the clock too, so a dashboard of kernel health can
  // leave out the ones measured at a lower clock.
  std::map<std::string, double> times;
  for (const auto& family : registry.Collect()) {
    if (family.name != "mxval_worker_kernel_time_seconds") continue;
    for (const auto& metric : family.metric)
      for (const auto& l : metric.label)
        if (l.name == "clock") times[l.value] += static_cast<double>(metric.histogram.sample_count);
  }
  EXPECT_EQ(times, (std::map<std::string, double>{{"steady", 4}, {"disturbed", 2}, {"unread", 2}}));
}

}  // namespace
}  // namespace mxval
