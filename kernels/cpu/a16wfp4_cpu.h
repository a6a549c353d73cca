// CPU A16WFP4 batched GEMM: the kernel under test on CPU-only workers and CI.
//
//   y[b, m, n] = bf16( sum_k xa[b, m, k] * w[b, n, k] )
//
//   x  (B, M, K)    bf16 bits, any strides
//   w  (B, N, K/2)  packed E2M1 + scales (B, N, K/32), any strides
//   y  (B, M, N) or (M, B, N) bf16 bits (strides from the layout)
//
// xa is x itself (bf16 mode) or x re-quantized per 32-K group with the
// "even" rule (mxfp4-even mode, via kernels/mxfp4).
//
// Structure: the grid is (batch, K split, M group). A program dequantizes
// its batch's weights for its K range once (fused from the packed nibbles
// and scales, BLOCK_K at a time, into a [N/16][K][16] panel) and reuses that
// panel across every M tile of its group. Each BLOCK_M x K block of
// activations is converted once (AVX2 bf16 widening; re-quantized in
// mxfp4-even mode) and then swept across the panel BLOCK_N columns at a time
// by a 6x16 register tile (AVX2/FMA, twelve ymm accumulators; scalar
// fallback). Ragged M, N and K are masked in the packing steps. With
// KSPLIT > 1 each split writes an FP32 partial (KSPLIT, B, M, N) buffer and a
// reduce step sums the splits in order (deterministic) and rounds to bf16.
// M is grouped only as far as needed to give every thread work.
#ifndef MXVAL_KERNELS_CPU_A16WFP4_CPU_H_
#define MXVAL_KERNELS_CPU_A16WFP4_CPU_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/gemm_problem.h"
#include "kernels/dispatch/tile_config.h"

namespace mxval {
namespace cpu {

struct CpuGemmArgs {
  GemmShape shape;
  ActivationMode activations = ActivationMode::kBf16;
  const uint16_t* x = nullptr;  // (B, M, K) bf16
  XStrides xs;
  WeightView w;
  uint16_t* y = nullptr;        // bf16, n contiguous
  YStrides ys;
  int threads = 0;              // 0: all
  bool force_scalar = false;    // portable loop even where AVX2 exists
};

// OK if the kernel can run `shape` with `config`, else INVALID_ARGUMENT
// naming the offending field: BLOCK_SIZE_M not in [1, 1024]; BLOCK_SIZE_N not
// a multiple of 16 in [16, 1024]; BLOCK_SIZE_K not a multiple of 32 in
// [32, 4096]; NUM_KSPLIT < 1 or larger than the number of K blocks
// (ceil(K / BLOCK_SIZE_K)) so that a split would be empty. Ragged K (K not a
// multiple of BLOCK_SIZE_K, e.g. K=192 with BLOCK_SIZE_K=128) is supported
// with masking.
absl::Status CanImplement(const GemmShape& shape, const TileConfig& config);

// Runs the GEMM. INVALID_ARGUMENT for bad shapes/configs/null pointers.
absl::Status RunA16WFP4(const CpuGemmArgs& args, const TileConfig& config);

}  // namespace cpu
}  // namespace mxval

#endif  // MXVAL_KERNELS_CPU_A16WFP4_CPU_H_
