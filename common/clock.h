// A tiny clock interface (Abseil 20220623 has no absl::Clock): inject it so
// time-dependent logic is tested with a fake clock, never with sleeps.
#ifndef MXVAL_COMMON_CLOCK_H_
#define MXVAL_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mxval {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  static const Clock* Get() {
    static const RealClock* c = new RealClock();
    return c;
  }
};

class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock l(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mxval

#endif  // MXVAL_COMMON_CLOCK_H_
