// FP32 reference for the A16WFP4 batched GEMM.
//
//   y[b, m, n] = sum_k xq[b, m, k] * w[b, n, k]
//
// w is dequantized exactly (E2M1 code * 2^(s-127)); xq is x rounded to bf16
// (RNE), and in `mxfp4-even` mode additionally re-quantized per 32-element K
// group with AITER's "even" scale rule. Accumulation is FP32 (or FP64).
//
// Independence: this library shares only the E2M1/E8M0 decode functions of
// kernels/mxfp4/mxfp4.h with the kernels under test. Its activation
// re-quantizer, GEMM loops and blocking are its own.
//
// Speed: W is dequantized once per batch into a K x N panel, rows are
// processed 6 at a time by an AVX2/FMA 6x16 register tile (scalar fallback
// when the CPU lacks AVX2/FMA), work is spread over threads.
#ifndef MXVAL_REFERENCE_REFERENCE_GEMM_H_
#define MXVAL_REFERENCE_REFERENCE_GEMM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/gemm_problem.h"

namespace mxval {
namespace reference {

struct ReferenceOptions {
  ActivationMode activations = ActivationMode::kBf16;
  // Accumulate in FP64 instead of FP32 (slower; for studying fp32 error).
  bool fp64_accumulate = false;
  // 0: all threads (MXVAL_THREADS or hardware concurrency).
  int threads = 0;
  // Empty: compute every row. Otherwise compute only these rows m (for every
  // batch and column); other rows of y are not touched. Must be in [0, M).
  std::vector<int64_t> rows;
  // Use the portable scalar loop even where AVX2/FMA is available (tests).
  bool force_scalar = false;
};

// Computes y. x is fp32 (rounded to bf16 here, as kernels see it).
// INVALID_ARGUMENT if the shape is invalid, a pointer is null, or a sampled
// row is out of range.
absl::Status ReferenceGemm(const GemmShape& shape, const float* x, const XStrides& xs, const WeightView& w,
                           float* y, const YStrides& ys, const ReferenceOptions& options);

// The reference's own "even"-rule activation fake-quantization of one
// 32-element group, in place: the values become dequant(quant_even(v)).
// A group holding NaN or Inf becomes all NaN (scale byte 0xFF).
void FakeQuantizeGroupEven(float* v);

// sum_k |xq[b,m,k] * w[b,n,k]| in FP64, with the operands exactly as
// ReferenceGemm uses them (bf16 x, re-quantized in mxfp4-even mode). The
// accuracy check uses it to bound legitimate fp32 accumulation differences.
double AbsDot(const GemmShape& shape, const float* x, const XStrides& xs, const WeightView& w,
              ActivationMode activations, int64_t b, int64_t m, int64_t n);

// Rows to check in sampled mode for M rows: always 0 and M-1, the first and
// last rows of the final (ragged) tile for every tile height in
// {16, 32, 64, 128, 256}, the rows on each side of every 256-row boundary up
// to `count` in total, then seeded random rows. Sorted, unique.
std::vector<int64_t> SampleRows(int64_t M, int64_t count, uint64_t seed);

// Whether the vectorized path is used on this CPU.
bool HasAvx2Fma();

}  // namespace reference
}  // namespace mxval

#endif  // MXVAL_REFERENCE_REFERENCE_GEMM_H_
