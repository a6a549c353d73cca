// Tensor-level MXFP4 quantization / dequantization along the last axis.
//
// Views are (rows, K) with a row stride; callers flatten leading axes (for
// [B, N, K] weights, rows = B*N when dense, or call once per batch).
#ifndef MXVAL_KERNELS_MXFP4_QUANTIZE_H_
#define MXVAL_KERNELS_MXFP4_QUANTIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/mxfp4/mxfp4.h"

namespace mxval {
namespace mxfp4 {

// Parses "floor" | "even" | "rceil". INVALID_ARGUMENT otherwise.
absl::StatusOr<ScaleRule> ParseScaleRule(const std::string& s);
std::string ScaleRuleName(ScaleRule r);

// Quantizes x (rows, K), element (r, k) at x[r * x_row_stride + k].
// packed: (rows, K/2) bytes at packed[r * packed_row_stride + k/2].
// scales: (rows, K/32) bytes at scales[r * scale_row_stride + k/32].
// INVALID_ARGUMENT if K is not a positive multiple of 32 or a stride is too
// small for its row.
absl::Status QuantizeRows(const float* x, int64_t rows, int64_t K, int64_t x_row_stride, ScaleRule rule,
                          uint8_t* packed, int64_t packed_row_stride, uint8_t* scales, int64_t scale_row_stride);

// Dequantizes (rows, K) back to fp32: out[r * out_row_stride + k].
absl::Status DequantizeRows(const uint8_t* packed, int64_t packed_row_stride, const uint8_t* scales,
                            int64_t scale_row_stride, int64_t rows, int64_t K, float* out, int64_t out_row_stride);

}  // namespace mxfp4
}  // namespace mxval

#endif  // MXVAL_KERNELS_MXFP4_QUANTIZE_H_
