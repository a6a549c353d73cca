// A ClockReader that plays back a script, for tests of the clock watch, the
// settle wait and the timing harness without a GPU.
#ifndef MXVAL_KERNELS_RUNTIME_SCRIPTED_CLOCKS_H_
#define MXVAL_KERNELS_RUNTIME_SCRIPTED_CLOCKS_H_

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/runtime/device_clocks.h"

namespace mxval {

// Read() returns the script's readings in order, then repeats the last one;
// an entry with `fail` set returns UNAVAILABLE instead.
class ScriptedClocks : public ClockReader {
 public:
  struct Step {
    ClockReading reading;
    bool fail = false;
  };
  explicit ScriptedClocks(std::vector<Step> script, int64_t power_limit_mw = 0)
      : script_(std::move(script)), limit_(power_limit_mw) {}
  std::string source() const override { return "scripted"; }
  absl::StatusOr<ClockReading> Read() override {
    absl::MutexLock l(&mu_);
    const Step& s = script_[std::min(reads_, script_.size() - 1)];
    ++reads_;
    if (s.fail) return absl::UnavailableError("scripted read failure");
    return s.reading;
  }
  int64_t power_limit_mw() override { return limit_; }
  int reads() {
    absl::MutexLock l(&mu_);
    return static_cast<int>(reads_);
  }

 private:
  absl::Mutex mu_;
  std::vector<Step> script_;
  size_t reads_ ABSL_GUARDED_BY(mu_) = 0;  // also the next script entry
  int64_t limit_;
};

}  // namespace mxval

#endif  // MXVAL_KERNELS_RUNTIME_SCRIPTED_CLOCKS_H_
