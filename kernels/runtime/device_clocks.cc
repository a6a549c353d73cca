#include "kernels/runtime/device_clocks.h"

#include <dlfcn.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/runtime/dl_bind.h"

namespace mxval {
namespace {

constexpr std::pair<uint64_t, const char*> kReasonNames[] = {
    {0x2, "app_clock_setting"}, {0x4, "sw_power_cap"}, {0x8, "hw_slowdown"},     {0x10, "sync_boost"},
    {0x20, "sw_thermal"},       {0x40, "hw_thermal"},  {0x80, "hw_power_brake"}, {0x100, "display_clock"},
};

// NVML's C API as far as the reader needs it (nvml.h): an opaque device
// handle, nvmlReturn_t as int (0 = NVML_SUCCESS).
using NvmlDevice = void*;
struct Nvml {
  int (*Init)() = nullptr;
  const char* (*ErrorString)(int) = nullptr;
  int (*HandleByPciBusId)(const char*, NvmlDevice*) = nullptr;
  int (*ClockInfo)(NvmlDevice, int, unsigned*) = nullptr;
  int (*Reasons)(NvmlDevice, unsigned long long*) = nullptr;  // NOLINT(runtime/int): nvml.h's type
  int (*PowerUsage)(NvmlDevice, unsigned*) = nullptr;
  int (*PowerLimit)(NvmlDevice, unsigned*) = nullptr;
};
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

class NvmlClocks : public ClockReader {
 public:
  NvmlClocks(Nvml api, NvmlDevice dev) : api_(api), dev_(dev) {}
  std::string source() const override { return "nvml"; }
  absl::StatusOr<ClockReading> Read() override {
    ClockReading r;
    unsigned mhz = 0;
    if (int e = api_.ClockInfo(dev_, kNvmlClockSm, &mhz); e != 0) {
      return absl::UnavailableError(absl::StrCat("nvmlDeviceGetClockInfo: ", api_.ErrorString(e)));
    }
    r.sm_mhz = static_cast<int>(mhz);
    unsigned long long bits = 0;  // NOLINT(runtime/int)
    if (api_.Reasons(dev_, &bits) == 0) r.reasons = bits;
    unsigned mw = 0;
    if (api_.PowerUsage != nullptr && api_.PowerUsage(dev_, &mw) == 0) r.power_mw = mw;
    return r;
  }
  int64_t power_limit_mw() override {
    unsigned mw = 0;
    return api_.PowerLimit != nullptr && api_.PowerLimit(dev_, &mw) == 0 ? mw : 0;
  }

 private:
  Nvml api_;
  NvmlDevice dev_;
};

}  // namespace

std::vector<std::string> ClockReasonNames(uint64_t reasons) {
  std::vector<std::string> out;
  uint64_t known = kClockReasonIdle;
  for (const auto& [bit, name] : kReasonNames) {
    known |= bit;
    if (reasons & bit) out.emplace_back(name);
  }
  if (uint64_t rest = reasons & ~known) out.push_back(absl::StrFormat("0x%x", rest));
  return out;
}

absl::StatusOr<std::unique_ptr<ClockReader>> OpenNvmlClocks(const std::string& pci_bus_id) {
  // Never closed: NVML stays loaded for the process, as libcuda does.
  static void* handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return absl::UnavailableError("NVML not found (dlopen libnvidia-ml.so.1 failed)");
  Nvml api;
  bool ok = DlBind(handle, api.Init, {"nvmlInit_v2"});
  ok &= DlBind(handle, api.ErrorString, {"nvmlErrorString"});
  ok &= DlBind(handle, api.HandleByPciBusId, {"nvmlDeviceGetHandleByPciBusId_v2"});
  ok &= DlBind(handle, api.ClockInfo, {"nvmlDeviceGetClockInfo"});
  // Renamed in newer drivers; the bits are the same.
  ok &= DlBind(handle, api.Reasons, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  DlBind(handle, api.PowerUsage, {"nvmlDeviceGetPowerUsage"});
  DlBind(handle, api.PowerLimit, {"nvmlDeviceGetEnforcedPowerLimit"});
  if (!ok) return absl::UnavailableError("libnvidia-ml.so.1 lacks an entry point mxval reads clocks with");
  if (int e = api.Init(); e != 0) return absl::UnavailableError(absl::StrCat("nvmlInit_v2: ", api.ErrorString(e)));
  if (pci_bus_id.empty()) return absl::UnavailableError("the device has no PCI bus id to find it in NVML by");
  NvmlDevice dev = nullptr;
  if (int e = api.HandleByPciBusId(pci_bus_id.c_str(), &dev); e != 0) {
    return absl::UnavailableError(
        absl::StrCat("NVML has no device at PCI bus id ", pci_bus_id, ": ", api.ErrorString(e)));
  }
  return std::unique_ptr<ClockReader>(new NvmlClocks(api, dev));
}

ClockSummary SummarizeClocks(const std::vector<ClockReading>& readings) {
  ClockSummary s;
  s.samples = static_cast<int>(readings.size());
  if (readings.empty()) return s;
  std::vector<int> mhz;
  for (const ClockReading& r : readings) {
    mhz.push_back(r.sm_mhz);
    s.reasons |= r.reasons;
    s.power_w_max = std::max(s.power_w_max, r.power_mw / 1000.0);
  }
  s.reasons &= ~kClockReasonIdle;
  std::sort(mhz.begin(), mhz.end());
  s.sm_mhz_min = mhz.front();
  s.sm_mhz_max = mhz.back();
  // The lower middle for an even count: a clock that was read, not a mean.
  s.sm_mhz_median = mhz[(mhz.size() - 1) / 2];
  return s;
}

std::string ClockText(const ClockSummary& s) {
  if (s.samples == 0) return absl::StrCat("no clock", s.note.empty() ? "" : ": ", s.note);
  std::string text = s.sm_mhz_max - s.sm_mhz_min >= 30 ? absl::StrCat(s.sm_mhz_min, "-", s.sm_mhz_max, " MHz")
                                                       : absl::StrCat(s.sm_mhz_median, " MHz");
  const std::vector<std::string> names = ClockReasonNames(s.reasons);
  if (!names.empty()) absl::StrAppend(&text, " ", absl::StrJoin(names, "+"));
  if (!s.settled) absl::StrAppend(&text, " (not settled after ", absl::StrFormat("%.1f", s.settle_s), " s)");
  return text;
}

ClockWatch::ClockWatch(ClockReader* reader, absl::Duration interval) : reader_(reader), interval_(interval) {}

ClockWatch::~ClockWatch() {
  {
    absl::MutexLock l(&mu_);
    running_ = false;
  }
  if (thread_.joinable()) thread_.join();
}

void ClockWatch::Take() {
  auto r = reader_->Read();
  absl::MutexLock l(&mu_);
  if (r.ok()) {
    readings_.push_back(*r);
  } else if (error_.empty()) {
    error_ = std::string(r.status().message());
  }
}

void ClockWatch::Poll() {
  absl::MutexLock l(&mu_);
  while (running_) {
    // Wakes at the interval, or at once when Stop() clears running_.
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](bool* running) { return !*running; }, &running_),
                         interval_);
    if (!running_) break;
    mu_.Unlock();
    Take();
    mu_.Lock();
  }
}

void ClockWatch::Start() {
  if (thread_.joinable()) Stop();  // a window still open is closed first
  {
    absl::MutexLock l(&mu_);
    readings_.clear();
    error_.clear();
    running_ = true;
  }
  Take();
  thread_ = std::thread([this] { Poll(); });
}

ClockSummary ClockWatch::Stop() {
  {
    absl::MutexLock l(&mu_);
    running_ = false;
  }
  if (thread_.joinable()) thread_.join();
  Take();
  absl::MutexLock l(&mu_);
  ClockSummary s = SummarizeClocks(readings_);
  s.source = reader_->source();
  if (s.samples == 0) {
    s.source.clear();
    s.note = error_;
  }
  return s;
}

SettleResult Settle(ClockReader& reader, absl::Duration max_wait, absl::Duration poll, const Clock& clock,
                    const std::function<void(absl::Duration)>& sleep) {
  const absl::Time start = clock.Now();
  const int64_t limit = reader.power_limit_mw();
  SettleResult out;
  while (true) {
    auto r = reader.Read();
    if (!r.ok()) {
      out.settled = false;
      break;
    }
    const bool calm = !(r->reasons & kClockReasonsSlowdown) && (limit <= 0 || r->power_mw * 2 < limit);
    if (calm) break;
    if (clock.Now() - start >= max_wait) {
      out.settled = false;
      break;
    }
    sleep(poll);
  }
  out.waited_s = absl::ToDoubleSeconds(clock.Now() - start);
  return out;
}

SettledClockWindow::SettledClockWindow(ClockReader* reader, absl::Duration settle_max, absl::Duration poll,
                                       std::string no_clock_note)
    : no_clock_note_(std::move(no_clock_note)) {
  if (reader == nullptr) return;
  settle_ = Settle(*reader, settle_max, poll);
  watch_ = std::make_unique<ClockWatch>(reader, poll);
  watch_->Start();
}

ClockSummary SettledClockWindow::Finish() {
  ClockSummary clock;
  if (watch_ != nullptr) {
    clock = watch_->Stop();
    clock.settle_s = settle_.waited_s;
    clock.settled = settle_.settled;
  } else {
    clock.note = no_clock_note_;
  }
  return clock;
}

}  // namespace mxval
