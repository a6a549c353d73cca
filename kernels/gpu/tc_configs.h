// a16wfp4_tc's compiled tile configs and its shared-memory (LDS) layout
// sizes, shared by the kernel (a16wfp4_gpu.cu) and by CPU tests: the AMD
// dispatch tables' check (amd_tables_test.cc) proves that every bucket of
// kernels/configs/gfx942.json and gfx950.json names a compiled config that
// fits the arch's LDS.
#ifndef MXVAL_KERNELS_GPU_TC_CONFIGS_H_
#define MXVAL_KERNELS_GPU_TC_CONFIGS_H_

#include <stddef.h>

#include "kernels/gpu/a16wfp4_tile.h"  // DequantLut

// The compiled tensor-core instantiations: (BM, BN, BK, WARPS_M, WARPS_N, STAGES).
#define MXVAL_TC_CONFIGS(X)  \
  X(16, 32, 128, 1, 2, 4)    \
  X(16, 64, 64, 1, 4, 4)     \
  X(32, 64, 64, 1, 4, 4)     \
  X(16, 32, 128, 1, 2, 2)    \
  X(16, 64, 64, 1, 4, 2)     \
  X(16, 64, 128, 1, 4, 2)    \
  X(32, 64, 64, 1, 4, 3)     \
  X(32, 64, 128, 1, 4, 3)    \
  X(64, 64, 64, 2, 2, 3)     \
  X(64, 64, 128, 2, 2, 3)    \
  X(64, 128, 64, 2, 2, 3)    \
  X(128, 64, 128, 2, 2, 2)   \
  X(128, 128, 64, 2, 2, 3)   \
  X(128, 128, 128, 2, 2, 2)  \
  X(128, 256, 64, 2, 4, 3)

namespace mxval {
namespace gpu {

// Shared memory of one a16wfp4_tc CTA, in layout order: the x stages
// (STAGES x BM rows of BK + 8 bf16), which the bf16 output tile (BM rows of
// BN + 8) reuses at the end; the packed weight stages (STAGES x BN x BK / 2);
// the dequantized weight tile (BN rows of BK + 8 bf16); the dequantization
// table; then the CTA's scale slab, BN x kgroups bytes (16-byte rounded).
MXVAL_HD constexpr size_t TcXRegionBytes(int bm, int bn, int bk, int stages) {
  const size_t x_stages = size_t(stages) * bm * (bk + 8) * 2, out_tile = size_t(bm) * (bn + 8) * 2;
  return x_stages > out_tile ? x_stages : out_tile;
}
MXVAL_HD constexpr size_t TcWpBytes(int bn, int bk, int stages) { return size_t(stages) * bn * (bk / 2); }
MXVAL_HD constexpr size_t TcFixedSmemBytes(int bm, int bn, int bk, int stages) {
  return TcXRegionBytes(bm, bn, bk, stages) + TcWpBytes(bn, bk, stages) + size_t(bn) * (bk + 8) * 2 +
         sizeof(DequantLut);
}
MXVAL_HD constexpr size_t TcSmemBytes(int bm, int bn, int bk, int stages, int kgroups) {
  return TcFixedSmemBytes(bm, bn, bk, stages) + (size_t(bn) * kgroups + 15) / 16 * 16;
}

}  // namespace gpu
}  // namespace mxval

#endif  // MXVAL_KERNELS_GPU_TC_CONFIGS_H_
