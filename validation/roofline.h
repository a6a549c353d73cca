// The device's roofline, measured on the device a task runs on, and a
// timing's fraction of it (issue #3: "the harness measures copy bandwidth
// and a bf16 GEMM rate on the device it runs on").
//
// Two ceilings, measured the way bench/gpu_bench.py measures them, so the
// worker's numbers and the benchmark's agree:
//   copy bandwidth  a device-to-device copy of a buffer well past the L2
//                   (1 GiB on the H200), timed with events on the stream;
//                   read + write bytes per second, median of the samples.
//   bf16 GEMM rate  a dense bf16 GEMM (8192^3, fp32 accumulation, bf16 out)
//                   through the vendor BLAS; 2 m n k per second, median.
// A call's floor is max(FLOPs / rate, minimal bytes / bandwidth); its
// fraction of the roofline is floor / measured time (1 = at the roofline).
//
// The BLAS is reached with dlopen, never linked, like the CUDA driver:
// cuda  cuBLAS (libcublas.so.13, .12 or .so) on the runtime's stream; it
//       shares the worker's primary context. Run on the H200 through
//       scripts/gpu_service_check.sh.
// hip   no GEMM probe yet (rocBLAS is not reachable from here to check one):
//       the roofline has its copy bandwidth only and says so.
// host  the copy is a memcpy; no GEMM probe. The host runtime exists for CI.
// Where the rate is missing, the floor is the memory floor alone and the
// note says so; where the copy could not be timed, nothing is reported.
#ifndef MXVAL_VALIDATION_ROOFLINE_H_
#define MXVAL_VALIDATION_ROOFLINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/runtime/device_runtime.h"

namespace mxval {

struct Roofline {
  double copy_bytes_per_s = 0;  // 0: not measured
  double bf16_flops_per_s = 0;  // 0: not measured (see note)
  std::string note;             // how each ceiling was measured, or why it was not
};

struct RooflineOptions {
  // The copy's buffer: min(copy_bytes, a sixteenth of the device's memory).
  int64_t copy_bytes = int64_t{1} << 30;
  int gemm_n = 8192;  // m = n = k
  int samples = 10;   // timed samples of each, after warmup ones
  int warmup = 2;
};

// Read + write bytes per second of a device-to-device copy of `bytes`.
absl::StatusOr<double> MeasureCopyBandwidth(DeviceRuntime& rt, int64_t bytes, int warmup, int samples);

// FLOP/s of an n^3 bf16 GEMM through the vendor BLAS. UNIMPLEMENTED on
// runtimes without a probe (hip, host); UNAVAILABLE when the BLAS library
// cannot be loaded; INTERNAL when a BLAS call fails.
absl::StatusOr<double> MeasureBf16GemmRate(DeviceRuntime& rt, int n, int warmup, int samples);

// Both, on the runtime's current device. Never fails: what could not be
// measured is left 0 and explained in the note.
Roofline MeasureRoofline(DeviceRuntime& rt, const RooflineOptions& options = {});

// max(flops / rate, bytes / bandwidth) in seconds; the memory term alone
// without a rate; 0 without a bandwidth.
double FloorSeconds(const Roofline& r, double flops, double bytes);

// floor / measured (both in seconds); 0 when either is not positive.
double RooflineFraction(double floor_s, double measured_s);

// Fills `elems` bf16 values at device pointer `dst` with pseudo-random
// values in about [-1, 1]: a block of 2^20 made on the host (seeded), then
// repeated on the device by doubling copies, so a 128 MB GEMM operand costs
// a 2 MB upload, not 64 M host values. (The GEMM probe's operands: constant
// data would draw less power and could time at a higher clock than real data.)
absl::Status FillRandomBf16(DeviceRuntime& rt, void* dst, size_t elems, uint32_t seed);

}  // namespace mxval

#endif  // MXVAL_VALIDATION_ROOFLINE_H_
