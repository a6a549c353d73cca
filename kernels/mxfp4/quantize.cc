#include "kernels/mxfp4/quantize.h"

#include "absl/strings/str_cat.h"

namespace mxval {
namespace mxfp4 {

absl::StatusOr<ScaleRule> ParseScaleRule(const std::string& s) {
  if (s == "floor") return ScaleRule::kFloor;
  if (s == "even") return ScaleRule::kEven;
  if (s == "rceil") return ScaleRule::kRceil;
  return absl::InvalidArgumentError(absl::StrCat("scale rule '", s, "' is not one of floor, even, rceil"));
}

std::string ScaleRuleName(ScaleRule r) {
  switch (r) {
    case ScaleRule::kFloor: return "floor";
    case ScaleRule::kEven: return "even";
    case ScaleRule::kRceil: return "rceil";
  }
  return "?";
}

namespace {
absl::Status CheckShape(int64_t rows, int64_t K, int64_t a, int64_t a_min, const char* a_name, int64_t b,
                        int64_t b_min, const char* b_name) {
  if (K <= 0 || K % kGroupSize != 0) {
    return absl::InvalidArgumentError(absl::StrCat("K = ", K, " must be a positive multiple of ", kGroupSize));
  }
  if (rows < 0) return absl::InvalidArgumentError("rows must be >= 0");
  if (rows > 1 && a < a_min) return absl::InvalidArgumentError(absl::StrCat(a_name, " = ", a, " < ", a_min));
  if (rows > 1 && b < b_min) return absl::InvalidArgumentError(absl::StrCat(b_name, " = ", b, " < ", b_min));
  return absl::OkStatus();
}
}  // namespace

absl::Status QuantizeRows(const float* x, int64_t rows, int64_t K, int64_t x_row_stride, ScaleRule rule,
                          uint8_t* packed, int64_t packed_row_stride, uint8_t* scales, int64_t scale_row_stride) {
  if (absl::Status s = CheckShape(rows, K, x_row_stride, K, "x_row_stride", packed_row_stride, K / 2,
                                  "packed_row_stride");
      !s.ok()) {
    return s;
  }
  if (rows > 1 && scale_row_stride < K / kGroupSize) {
    return absl::InvalidArgumentError(absl::StrCat("scale_row_stride = ", scale_row_stride, " < ", K / kGroupSize));
  }
  uint8_t codes[kGroupSize];
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_row_stride;
    uint8_t* pr = packed + r * packed_row_stride;
    for (int64_t g = 0; g < K / kGroupSize; ++g) {
      scales[r * scale_row_stride + g] = QuantizeBlock(xr + g * kGroupSize, 1, kGroupSize, rule, codes);
      for (int i = 0; i < kGroupSize; i += 2) {
        pr[(g * kGroupSize + i) / 2] = static_cast<uint8_t>(codes[i] | (codes[i + 1] << 4));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeRows(const uint8_t* packed, int64_t packed_row_stride, const uint8_t* scales,
                            int64_t scale_row_stride, int64_t rows, int64_t K, float* out, int64_t out_row_stride) {
  if (absl::Status s = CheckShape(rows, K, out_row_stride, K, "out_row_stride", packed_row_stride, K / 2,
                                  "packed_row_stride");
      !s.ok()) {
    return s;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < K; ++k) {
      out[r * out_row_stride + k] =
          DecodeE2M1(UnpackCode(packed + r * packed_row_stride, k)) * DecodeE8M0(scales[r * scale_row_stride + k / kGroupSize]);
    }
  }
  return absl::OkStatus();
}

}  // namespace mxfp4
}  // namespace mxval
