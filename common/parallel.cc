#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

namespace mxval {

int DefaultThreadCount() {
  if (const char* env = std::getenv("MXVAL_THREADS")) {
    const int v = std::atoi(env);
    if (v > 0) return v;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

int EffectiveThreads(int64_t n, int threads) {
  if (threads <= 0) threads = DefaultThreadCount();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
}

void ParallelFor(int64_t n, int threads, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  const int t = EffectiveThreads(n, threads);
  if (t == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  auto body = [&](int tid) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(i, tid);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(t - 1);
  for (int tid = 1; tid < t; ++tid) pool.emplace_back(body, tid);
  body(0);
  for (auto& th : pool) th.join();
}

}  // namespace mxval
