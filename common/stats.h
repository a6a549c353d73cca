#ifndef MXVAL_COMMON_STATS_H_
#define MXVAL_COMMON_STATS_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace mxval {

// The q-quantile of `v` (0 <= q <= 1) by nearest rank on a sorted copy:
// the element at round(q * (n - 1)), so the median of an even count is the
// upper one. 0 for an empty vector. The timing harness's median / p10 / p90
// and the roofline's medians use it, so both read samples the same way.
inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double clamped = std::clamp(q, 0.0, 1.0);
  return v[static_cast<size_t>(clamped * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace mxval

#endif  // MXVAL_COMMON_STATS_H_
