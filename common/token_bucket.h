// A token bucket for per-client rate limits: `rate` tokens per second, at
// most `burst` saved up; starts full. Time comes from the caller (an injected
// clock), so tests drive it without sleeping. Not thread-safe.
#ifndef MXVAL_COMMON_TOKEN_BUCKET_H_
#define MXVAL_COMMON_TOKEN_BUCKET_H_

#include <algorithm>

#include "absl/time/time.h"

namespace mxval {

class TokenBucket {
 public:
  TokenBucket(double rate_per_second, double burst) : rate_(rate_per_second), burst_(std::max(1.0, burst)) {}

  // Takes one token if there is one. Otherwise returns false and sets *wait
  // to the time until one is available.
  bool TryTake(absl::Time now, absl::Duration* wait) {
    if (!started_) {
      tokens_ = burst_;
      refilled_ = now;
      started_ = true;
    }
    if (now > refilled_) {
      tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - refilled_) * rate_);
      refilled_ = now;
    }
    if (tokens_ >= 1.0) {
      tokens_ -= 1.0;
      return true;
    }
    *wait = rate_ > 0 ? absl::Seconds((1.0 - tokens_) / rate_) : absl::InfiniteDuration();
    return false;
  }

 private:
  double rate_, burst_;
  double tokens_ = 0;
  absl::Time refilled_;
  bool started_ = false;
};

}  // namespace mxval

#endif  // MXVAL_COMMON_TOKEN_BUCKET_H_
