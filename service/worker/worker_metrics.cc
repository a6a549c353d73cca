#include "service/worker/worker_metrics.h"

#include "absl/strings/ascii.h"

#include "absl/strings/str_cat.h"

namespace mxval {
namespace worker {

std::string MBucket(int64_t m) {
  if (m <= 1) return "1";
  if (m <= 16) return "2-16";
  if (m <= 64) return "17-64";
  if (m <= 256) return "65-256";
  if (m <= 1024) return "257-1024";
  if (m <= 4096) return "1025-4096";
  return "4097+";
}

WorkerMetrics::WorkerMetrics(prometheus::Registry& r)
    : kernel_seconds_(prometheus::BuildHistogram()
                          .Name("mxval_worker_kernel_time_seconds")
                          .Help("Median kernel time per task, by kernel, side (baseline/candidate), M bucket, arch, launch (plain/pdl) "
                                "and clock (steady, disturbed: timed while the SM clock moved; unread).")
                          .Register(r)),
      tflops_(prometheus::BuildGauge()
                  .Name("mxval_worker_kernel_tflops")
                  .Help("Achieved TFLOP/s of the last task, by kernel, side, M bucket, arch, launch and clock.")
                  .Register(r)),
      rel_err_(prometheus::BuildGauge()
                   .Name("mxval_worker_kernel_rel_fro_error")
                   .Help("Relative Frobenius error of the last task, by kernel and side.")
                   .Register(r)),
      tasks_(prometheus::BuildCounter().Name("mxval_worker_tasks_total").Help("Tasks by outcome: pass, fail, infra.").Register(r)),
      child_crashes_(prometheus::BuildCounter()
                         .Name("mxval_worker_child_crashes_total")
                         .Help("Task child processes that died on a signal, timed out or failed to start.")
                         .Register(r)
                         .Add({})),
      abandoned_(prometheus::BuildCounter()
                     .Name("mxval_worker_tasks_abandoned_total")
                     .Help("Tasks dropped unreported because the coordinator took their lease away, by reason: lost "
                           "(a heartbeat named the lease cancelled or expired; the child was killed) or not_accepted "
                           "(the coordinator refused the result).")
                     .Register(r)),
      drained_(prometheus::BuildGauge()
                   .Name("mxval_worker_drained")
                   .Help("1 while the coordinator has this worker drained (it heartbeats but leases nothing).")
                   .Register(r)
                   .Add({})),
      runs_(prometheus::BuildCounter()
                .Name("mxval_worker_kernel_runs_total")
                .Help("Kernel runs by kernel, side, arch, launch and verdict (pass, fail_mismatch, error, ...).")
                .Register(r)),
      device_healthy_(prometheus::BuildGauge()
                          .Name("mxval_worker_device_healthy")
                          .Help("1 if the device takes work, 0 if marked unhealthy.")
                          .Register(r)),
      timing_windows_(prometheus::BuildCounter()
                          .Name("mxval_worker_timing_windows_total")
                          .Help("Timed device tasks by arch and clock: steady, disturbed (the SM clock moved, or a "
                                "power or thermal slowdown was set: the times are at a lower clock) or unread (no "
                                "clock reader for the device).")
                          .Register(r)),
      timing_clock_(prometheus::BuildHistogram()
                        .Name("mxval_worker_timing_sm_clock_min_mhz")
                        .Help("The lowest SM clock read while a task's samples ran, by arch.")
                        .Register(r)),
      roofline_fraction_(prometheus::BuildGauge()
                             .Name("mxval_worker_kernel_roofline_fraction")
                             .Help("Floor / median time of the last task (1 = at the device's measured roofline: "
                                   "max(FLOPs / bf16 GEMM rate, minimal bytes / copy bandwidth)), by kernel, side, "
                                   "M bucket, arch, launch and clock. Device kernels only.")
                             .Register(r)),
      device_copy_bw_(prometheus::BuildGauge()
                          .Name("mxval_worker_device_copy_bytes_per_second")
                          .Help("Read + write bytes per second of a device-to-device copy, as the last task measured "
                                "it on its device, by arch.")
                          .Register(r)),
      device_bf16_rate_(prometheus::BuildGauge()
                            .Name("mxval_worker_device_bf16_gemm_flops")
                            .Help("FLOP/s of a dense bf16 GEMM through the vendor BLAS, as the last task measured it "
                                  "on its device, by arch (absent where no probe exists).")
                            .Register(r)) {}

// "pdl" or "plain": a PDL launch overlaps the kernel before it, so its times
// are a different series, not a point of the plain one.
const char* LaunchLabel(const v1::KernelRun& run) { return run.launch() == v1::LAUNCH_MODE_PDL ? "pdl" : "plain"; }

// "steady", "disturbed" (the SM clock moved or a power / thermal slowdown
// was set while the samples ran: the times are at a lower clock) or
// "unread" (no clock was read: CPU kernels, devices without a reader).
const char* ClockLabel(const v1::KernelRun& run) {
  const v1::ClockWindow& c = run.timing().clock();
  return c.samples() == 0 ? "unread" : c.disturbed() ? "disturbed" : "steady";
}

void WorkerMetrics::TaskResult(const v1::TaskResult& r) {
  static const prometheus::Histogram::BucketBoundaries kBuckets{1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10};
  for (const auto& [side, run] : {std::pair{"baseline", &r.baseline()}, std::pair{"candidate", &r.candidate()}}) {
    if (run->kernel().kernel().empty() || run->timing().median_us() <= 0) continue;
    const std::string& k = run->kernel().kernel();
    const std::string arch = r.arch().empty() ? "unknown" : r.arch();
    const std::string bucket = MBucket(r.m());
    const char* launch = LaunchLabel(*run);
    const char* clock = ClockLabel(*run);
    kernel_seconds_
        .Add({{"kernel", k}, {"side", side}, {"m_bucket", bucket}, {"arch", arch}, {"launch", launch}, {"clock", clock}},
             kBuckets)
        .Observe(run->timing().median_us() * 1e-6);
    tflops_.Add({{"kernel", k}, {"side", side}, {"m_bucket", bucket}, {"arch", arch}, {"launch", launch}, {"clock", clock}})
        .Set(run->timing().tflops());
    rel_err_.Add({{"kernel", k}, {"side", side}, {"arch", arch}}).Set(run->accuracy().rel_fro_err());
    if (run->timing().roofline_fraction() > 0) {
      roofline_fraction_
          .Add({{"kernel", k}, {"side", side}, {"m_bucket", bucket}, {"arch", arch}, {"launch", launch}, {"clock", clock}})
          .Set(run->timing().roofline_fraction());
    }
  }
  if (r.roofline().copy_gbps() > 0) {
    const std::string arch = r.arch().empty() ? "unknown" : r.arch();
    device_copy_bw_.Add({{"arch", arch}}).Set(r.roofline().copy_gbps() * 1e9);
    if (r.roofline().bf16_tflops() > 0) device_bf16_rate_.Add({{"arch", arch}}).Set(r.roofline().bf16_tflops() * 1e12);
  }
  // One timing window per task: baseline and candidate are timed together
  // (a side timed alone has its own window; the first one read counts).
  for (const v1::KernelRun* run : {&r.baseline(), &r.candidate()}) {
    if (run->timing().median_us() <= 0 || (!run->timing().has_clock())) continue;
    const v1::ClockWindow& c = run->timing().clock();
    const std::string arch = r.arch().empty() ? "unknown" : r.arch();
    static const prometheus::Histogram::BucketBoundaries kMhz{600, 900, 1200, 1400, 1600, 1700, 1800, 1900, 1950, 2000};
    timing_windows_.Add({{"arch", arch}, {"clock", ClockLabel(*run)}}).Increment();
    if (c.samples() > 0) timing_clock_.Add({{"arch", arch}}, kMhz).Observe(c.sm_mhz_min());
    break;
  }
  for (const auto& [side, run] : {std::pair{"baseline", &r.baseline()}, std::pair{"candidate", &r.candidate()}}) {
    std::string verdict = v1::Verdict_Name(run->accuracy().verdict());
    if (verdict.rfind("VERDICT_", 0) == 0) verdict = absl::AsciiStrToLower(verdict.substr(8));
    runs_.Add({{"kernel", run->kernel().kernel().empty() ? "unknown" : run->kernel().kernel()},
               {"side", side},
               {"arch", r.arch().empty() ? "unknown" : r.arch()},
               {"launch", LaunchLabel(*run)},
               {"verdict", verdict}})
        .Increment();
  }
}

void WorkerMetrics::DeviceHealth(int index, const std::string& arch, bool healthy) {
  device_healthy_.Add({{"device", absl::StrCat(index)}, {"arch", arch}}).Set(healthy ? 1 : 0);
}

}  // namespace worker
}  // namespace mxval
