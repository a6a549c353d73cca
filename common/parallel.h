// A minimal fork-join parallel loop over an index range on std::threads.
//
// Work items are handed out dynamically (atomic counter) so uneven tiles
// balance. Deterministic results are the caller's job: each index must write
// disjoint memory.
#ifndef MXVAL_COMMON_PARALLEL_H_
#define MXVAL_COMMON_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace mxval {

// Number of worker threads to use when the caller asks for 0 ("all"): the
// MXVAL_THREADS environment variable if set, else hardware concurrency.
int DefaultThreadCount();

// Calls fn(i) for every i in [0, n) on up to `threads` threads (0 = default).
// fn(i) receives the calling thread's index in [0, threads) as second argument
// so callers can use per-thread scratch buffers.
void ParallelFor(int64_t n, int threads, const std::function<void(int64_t i, int tid)>& fn);

// Number of threads ParallelFor will use for `n` items and a requested count.
int EffectiveThreads(int64_t n, int threads);

}  // namespace mxval

#endif  // MXVAL_COMMON_PARALLEL_H_
