#include "common/parallel.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace mxval {
namespace {

TEST(ParallelFor, VisitsEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> hits(1000);
    std::atomic<int> max_tid{0};
    ParallelFor(1000, threads, [&](int64_t i, int tid) {
      hits[i]++;
      int cur = max_tid.load();
      while (tid > cur && !max_tid.compare_exchange_weak(cur, tid)) {
      }
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    EXPECT_LT(max_tid.load(), threads);
  }
  ParallelFor(0, 4, [](int64_t, int) { FAIL(); });
  EXPECT_EQ(EffectiveThreads(1, 8), 1);
  EXPECT_EQ(EffectiveThreads(100, 3), 3);
}

}  // namespace
}  // namespace mxval
