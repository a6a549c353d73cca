// Device mirrors of a validation case, and the GPU timing harness.
//
// DeviceCase uploads a CaseData's guarded buffers once (guards included, so
// an over-read on the device sees the same 0xFF scales / NaN rows as on the
// host) and runs kernels reached through the kernel ABI on them: y is
// copied in poisoned, the workspace is filled with 0xFF (its contents are
// undefined on entry), the device is synchronized (so an asynchronous fault
// is reported by this run) and y is copied back for the host-side checker.
//
// With launch flag MXVAL_LAUNCH_PDL (used only if the kernel acts on it),
// the run follows the runtime's late writer: x is poisoned (0xFF, NaN) and
// the writer lets the kernel start at once, then after 20 us copies the
// poisoned y over y and the real x over x. A kernel that reads x or writes
// y before griddepcontrol.wait fails the check (non-finite or unwritten).
//
// Time() is the timing harness: warm-up launches, then samples of L
// back-to-back launches between two events (captured into a graph where the
// runtime can, so launch overhead does not dominate microsecond kernels),
// each launch on the next of several rotating copies of x, w, scales, y and
// the workspace whose total exceeds the device's L2 so cache residency does
// not flatter the numbers. Reports per-launch median / p10 / p90.
// TimeInterleaved() times several kernels on the same buffers with their
// samples interleaved (A B, B A, A B, ...): a baseline and a candidate are
// compared under the same conditions. Timed one after the other, the second
// can inherit what the first left behind; on the H200 a large-M window timed
// right after another ran under the board's power cap at 1500 MHz where the
// first had run at 1980 (BENCHMARKS.md, "Clocks beside every timing").
// With a clock reader (TimingOptions::clocks) the samples start once the
// board is off its power cap and each timing carries the SM clock they ran
// at, so a report can tell a slower kernel from a slower clock.
#ifndef MXVAL_VALIDATION_DEVICE_CASE_H_
#define MXVAL_VALIDATION_DEVICE_CASE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/abi/kernel_library.h"
#include "kernels/runtime/device_clocks.h"
#include "kernels/runtime/device_runtime.h"
#include "validation/validation_case.h"

namespace mxval {

struct TimingOptions {
  int warmup = 3;          // launches before the first sample (per buffer set at least once)
  int samples = 10;        // timed samples; statistics are over these
  int launches_per_sample = 0;  // 0: enough for ~0.2 ms per sample, at most 64
  bool use_graph = true;        // fall back to eager launches when capture fails
  int64_t rotate_bytes = 0;     // 0: 3x the device's L2 (at least one set)
  int64_t max_rotate_bytes = int64_t{2} << 30;
  int max_sets = 32;
  // The device's clocks (device_clocks.h), or null where they cannot be
  // read. With a reader, the samples wait until the board is off its power
  // and thermal limits (at most settle_max), and the clock is read every
  // clock_poll while they run. Without one, each timing's clock says
  // no_clock_note.
  ClockReader* clocks = nullptr;
  absl::Duration settle_max = absl::Seconds(3);
  // Each read is an NVML call on a second thread while the timed launches
  // are issued; reads are kept sparse, and a 4 ms window still gets its
  // first and last read.
  absl::Duration clock_poll = absl::Milliseconds(5);
  std::string no_clock_note;
};

// One kernel to time: TimeInterleaved() takes several.
struct TimedKernel {
  const mxval_kernel* kernel = nullptr;
  TileConfig config;
  uint32_t launch_flags = 0;
};

struct DeviceTiming {
  std::vector<double> per_launch_seconds;  // one per sample
  double median_s = 0, p10_s = 0, p90_s = 0;
  int buffer_sets = 1;
  int launches_per_sample = 1;
  bool graph = false;
  std::string eager_reason;  // why not, when graph is false
  // The SM clock while the samples ran (the same window for every side of
  // an interleaved timing).
  ClockSummary clock;
};

class DeviceCase {
 public:
  // The runtime must have a current device. RESOURCE_EXHAUSTED when the
  // device cannot hold the case.
  static absl::StatusOr<std::unique_ptr<DeviceCase>> Upload(DeviceRuntime& rt, const CaseData& data);

  // Runs `kernel` once on the mirrors (see above). Errors: the kernel's
  // refusal (INVALID_ARGUMENT) or a device fault (INTERNAL). `data` must be
  // the case this was uploaded from.
  KernelFn Kernel(const mxval_kernel* kernel, const TileConfig& config, uint32_t launch_flags = 0);

  // launch_flags: as for Kernel(); every timed launch carries them (with PDL
  // each launch may overlap the tail of the one before).
  absl::StatusOr<DeviceTiming> Time(const mxval_kernel* kernel, const TileConfig& config,
                                    const TimingOptions& options, uint32_t launch_flags = 0);

  // Times each of `sides` as Time() does (same rotating buffer sets, each
  // side its own warm-up, launches per sample and graph), with the samples
  // interleaved: sample s runs the sides in order when s is even and in
  // reverse when it is odd. One DeviceTiming per side, in `sides`' order.
  // Errors as Time(), for whichever side fails first; INVALID_ARGUMENT when
  // `sides` is empty.
  absl::StatusOr<std::vector<DeviceTiming>> TimeInterleaved(const std::vector<TimedKernel>& sides,
                                                            const TimingOptions& options);

  // The flags a run of `kernel` gets when `requested` are asked for.
  static uint32_t EffectiveFlags(const mxval_kernel* kernel, uint32_t requested) {
    return requested & kernel->launch_flags;
  }

  DeviceRuntime& runtime() { return rt_; }

 private:
  struct Set {
    DeviceBuffer x, packed, scales, y, workspace;
  };
  DeviceCase(DeviceRuntime& rt, const CaseData& d) : rt_(rt), data_(d) {}
  absl::Status AddSet();
  // Reallocates `b` (contents lost) when it holds fewer than `bytes`.
  absl::Status Grow(DeviceBuffer& b, size_t bytes);
  mxval_gemm_args Args(const Set& s) const;
  // y inside its buffer, between kYGuardElems guard elements on each side.
  static void* YOf(const Set& s);
  // Writes the guard pattern around y / OUT_OF_RANGE with
  // kOutOfBoundsPayload when a kernel wrote into it.
  absl::Status ArmGuards(const Set& s);
  absl::Status CheckGuards(const Set& s);

  DeviceRuntime& rt_;
  const CaseData& data_;
  std::vector<Set> sets_;  // sets_[0] holds the uploaded case
  DeviceBuffer late_x_, late_y_;  // the late writer's sources: the real x, the poisoned y
};

}  // namespace mxval

#endif  // MXVAL_VALIDATION_DEVICE_CASE_H_
