// Description of one A16WFP4 batched GEMM problem: shapes, operand views and
// output layout. Pure description shared by the reference and the kernels;
// it holds no arithmetic.
//
//   y[b, m, n] = sum_k x[b, m, k] * dequant(w)[b, n, k]
//
//   x       (B, M, K)    activations, any strides (e.g. (256, 4096, 1))
//   w       (B, N, K/2)  uint8, two E2M1 codes per byte along K
//   scales  (B, N, K/32) uint8 E8M0
//   y       (B, M, N) head-major  or  (M, B, N) batch-major, n contiguous
#ifndef MXVAL_COMMON_GEMM_PROBLEM_H_
#define MXVAL_COMMON_GEMM_PROBLEM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace mxval {

enum class ActivationMode {
  kBf16 = 0,       // true A16WFP4: x rounded to bf16, used as is
  kMxfp4Even = 1,  // AITER numerics: x re-quantized per 32-K group, "even" rule
};

enum class OutputLayout {
  kHeadMajor = 0,   // (B, M, N)
  kBatchMajor = 1,  // (M, B, N)
};

// How x (B, M, K) lies in memory (see validation_case.h for the guards).
enum class XLayout {
  kKContiguous = 0,  // x_stride_k = 1 (rows dense or of a wider pitch)
  kKStrided = 1,     // x_stride_k = 2: every other element of rows twice as wide
  kMMajor = 2,       // stored (B, K, M + guard rows): x_stride_m = 1
};

inline std::string XLayoutName(XLayout l) {
  return l == XLayout::kKStrided ? "k-strided" : l == XLayout::kMMajor ? "m-major" : "k-contiguous";
}
inline absl::StatusOr<XLayout> ParseXLayout(const std::string& s) {
  if (s == "k-contiguous") return XLayout::kKContiguous;
  if (s == "k-strided") return XLayout::kKStrided;
  if (s == "m-major") return XLayout::kMMajor;
  return absl::InvalidArgumentError(absl::StrCat("x layout '", s, "' is not one of k-contiguous, k-strided, m-major"));
}

inline std::string ActivationModeName(ActivationMode a) { return a == ActivationMode::kBf16 ? "bf16" : "mxfp4-even"; }
inline std::string OutputLayoutName(OutputLayout l) { return l == OutputLayout::kHeadMajor ? "head-major" : "batch-major"; }

inline absl::StatusOr<ActivationMode> ParseActivationMode(const std::string& s) {
  if (s == "bf16") return ActivationMode::kBf16;
  if (s == "mxfp4-even") return ActivationMode::kMxfp4Even;
  return absl::InvalidArgumentError(absl::StrCat("activations '", s, "' is not one of bf16, mxfp4-even"));
}
inline absl::StatusOr<OutputLayout> ParseOutputLayout(const std::string& s) {
  if (s == "head-major") return OutputLayout::kHeadMajor;
  if (s == "batch-major") return OutputLayout::kBatchMajor;
  return absl::InvalidArgumentError(absl::StrCat("layout '", s, "' is not one of head-major, batch-major"));
}

struct GemmShape {
  int64_t B = 1, M = 1, N = 1, K = 32;
  double Flops() const { return 2.0 * B * M * N * K; }
};

// Strides in elements of the activation view (B, M, K).
struct XStrides {
  int64_t b = 0, m = 0, k = 1;
  static XStrides Dense(const GemmShape& s) { return {s.M * s.K, s.K, 1}; }
};

// Quantized weights: packed (B, N, K/2) and scales (B, N, K/32), strides in bytes.
struct WeightView {
  const uint8_t* packed = nullptr;
  int64_t packed_stride_b = 0, packed_stride_n = 0;
  const uint8_t* scales = nullptr;
  int64_t scale_stride_b = 0, scale_stride_n = 0;
};

// Output strides in elements; n is contiguous.
struct YStrides {
  int64_t b = 0, m = 0;
  static YStrides For(const GemmShape& s, OutputLayout l) {
    return l == OutputLayout::kHeadMajor ? YStrides{s.M * s.N, s.N} : YStrides{s.N, s.B * s.N};
  }
};

// INVALID_ARGUMENT naming the field if a dimension is out of range.
inline absl::Status ValidateShape(const GemmShape& s) {
  if (s.B < 1) return absl::InvalidArgumentError(absl::StrCat("B = ", s.B, " must be >= 1"));
  if (s.M < 1) return absl::InvalidArgumentError(absl::StrCat("M = ", s.M, " must be >= 1"));
  if (s.N < 1) return absl::InvalidArgumentError(absl::StrCat("N = ", s.N, " must be >= 1"));
  if (s.K < 32 || s.K % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("K = ", s.K, " must be a positive multiple of 32 (one E8M0 scale per 32)"));
  }
  return absl::OkStatus();
}

}  // namespace mxval

#endif  // MXVAL_COMMON_GEMM_PROBLEM_H_
