// The device's SM clock beside every timed window.
//
// Why: on the H200 the board reaches its software power cap during large-M
// work and the SM clock then drops from 1980 to 1020-1800 MHz for a second
// or more (BENCHMARKS.md, "Clocks beside every timing"). A time measured
// under the cap and one measured at full clock are not the same kernel's
// speed, so the worker's timing harness records the clock its samples ran
// at, and waits before a window until the board is off the cap.
//
// ClockReader reads one device (SM clock, clock-event reasons, power).
// OpenNvmlClocks() reads an NVIDIA device through NVML, reached with
// dlopen("libnvidia-ml.so.1") and never linked, like the CUDA driver in
// cuda_runtime.cc. AMD devices have no reader (rocm-smi is not reachable
// here); their timings carry no clock, which the result says.
//
// ClockWatch polls a reader on a thread while a window is open, plus one
// read when the window opens and one when it closes, so a window shorter
// than the poll interval still has two samples. Settle() waits, at most
// max_wait, until no power or thermal reason is set and the power reading is
// under half the board's limit.
#ifndef MXVAL_KERNELS_RUNTIME_DEVICE_CLOCKS_H_
#define MXVAL_KERNELS_RUNTIME_DEVICE_CLOCKS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace mxval {

// nvmlClocksEventReasons (nvml.h). GPU idle (0x1) is dropped from
// summaries: between timed launches the GPU is briefly idle, which says
// nothing about its speed.
constexpr uint64_t kClockReasonIdle = 0x1;
// The reasons that mean the board holds its clocks down for power or heat:
// software power cap, hardware slowdown, software / hardware thermal,
// hardware power brake.
constexpr uint64_t kClockReasonsSlowdown = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

// Names of the set bits, lowest first ("sw_power_cap", "hw_thermal", ...);
// unknown bits as one hex entry. Idle is never named.
std::vector<std::string> ClockReasonNames(uint64_t reasons);

struct ClockReading {
  int sm_mhz = 0;
  uint64_t reasons = 0;   // nvmlClocksEventReasons bits
  int64_t power_mw = 0;   // 0 where the reader cannot tell
};

class ClockReader {
 public:
  virtual ~ClockReader() = default;
  // "nvml"; what a summary names as its source.
  virtual std::string source() const = 0;
  virtual absl::StatusOr<ClockReading> Read() = 0;
  // The board's enforced power limit in mW; 0 where unknown.
  virtual int64_t power_limit_mw() = 0;
};

// NVML for the device with this PCI bus id ("0000:18:00.0", as the CUDA
// driver reports it). UNAVAILABLE (naming why) when NVML is missing or does
// not know the device.
absl::StatusOr<std::unique_ptr<ClockReader>> OpenNvmlClocks(const std::string& pci_bus_id);

// What a window's samples saw.
struct ClockSummary {
  std::string source;  // the reader's; empty: no clock was read (note says why)
  std::string note;
  int samples = 0;
  int sm_mhz_min = 0, sm_mhz_median = 0, sm_mhz_max = 0;
  uint64_t reasons = 0;  // the OR of the samples' reasons, idle dropped
  double power_w_max = 0;
  double settle_s = 0;   // waited before the window for the board to cool off
  bool settled = true;   // false: the wait gave up with the board still capped or hot
  // Whether the SM clock moved by 30 MHz or more, a slowdown reason was set
  // or the settle wait gave up: the window's times then mix clock speeds.
  bool Disturbed() const {
    return samples > 0 && (sm_mhz_max - sm_mhz_min >= 30 || (reasons & kClockReasonsSlowdown) || !settled);
  }
};

// Summary of `readings` (source, note and settle fields left empty).
ClockSummary SummarizeClocks(const std::vector<ClockReading>& readings);

// "1980 MHz", "1500-1980 MHz sw_power_cap"; "no clock: <note>" without samples.
std::string ClockText(const ClockSummary& s);

// Polls a reader on its own thread between Start() and Stop().
class ClockWatch {
 public:
  ClockWatch(ClockReader* reader, absl::Duration interval);
  ~ClockWatch();
  ClockWatch(const ClockWatch&) = delete;
  ClockWatch& operator=(const ClockWatch&) = delete;
  // One read now, then one every `interval` until Stop(). A window still
  // open is closed (and its readings dropped) first.
  void Start();
  // One last read; the window's summary. A failed read is left out (the
  // first failure's message becomes the note when no read succeeded).
  ClockSummary Stop();

 private:
  void Take();
  void Poll();
  ClockReader* reader_;
  absl::Duration interval_;
  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<ClockReading> readings_ ABSL_GUARDED_BY(mu_);
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

struct SettleResult {
  double waited_s = 0;
  bool settled = true;
};

// Waits until the board is off its power and thermal limits: no slowdown
// reason set and (where the limit is known) power under half of it. Reads
// every `poll`, gives up after `max_wait`. `sleep` and `clock` are injected
// for tests. A failed read ends the wait (not settled).
SettleResult Settle(ClockReader& reader, absl::Duration max_wait, absl::Duration poll,
                    const Clock& clock = *RealClock::Get(),
                    const std::function<void(absl::Duration)>& sleep = absl::SleepFor);

// A timed window as the harness runs one: with a reader, wait until the
// board is off its limits (Settle, at most settle_max), then watch the clock
// until Finish(), whose summary carries the settle wait; without a reader,
// Finish() returns a summary with no samples and `no_clock_note`.
class SettledClockWindow {
 public:
  SettledClockWindow(ClockReader* reader, absl::Duration settle_max, absl::Duration poll, std::string no_clock_note);
  ClockSummary Finish();

 private:
  SettleResult settle_;
  std::unique_ptr<ClockWatch> watch_;
  std::string no_clock_note_;
};

}  // namespace mxval

#endif  // MXVAL_KERNELS_RUNTIME_DEVICE_CLOCKS_H_
