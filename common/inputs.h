// Seeded input generators for validation cases.
//
//   normal[:sigma]        x ~ N(0, sigma^2)                  (default sigma 1)
//   mxfp4-exact           random E2M1 codes x 2^e per 32-group, e in [-3, 3]:
//                         exactly representable in MXFP4 (what AITER's test
//                         feeds; it hides re-quantization bugs, so never the
//                         only generator)
//   heavy-tail[:p]        N(0,1) with a fraction p (default 1e-3) of outliers
//                         scaled x100, plus per-row magnitude spread
//   uniform-codes         every E2M1 code equally likely, scales 2^[-2, 2]
//   extreme-scales        weights only: normal values, then in about two
//                         thirds of the (batch, 32-K group) pairs the scale
//                         bytes sit at the ends of E8M0 (a third 0/1 =
//                         2^-127/2^-126, a third 253/254 = 2^126/2^127 with
//                         codes limited to |e| <= 1.5) and the activations of that group are
//                         rescaled (x ~ 2^124 or 2^-124) so the products stay
//                         normal floats and count in the sums. It reaches the
//                         kernels' rare exact dequant path (dequantized
//                         weights subnormal or near the float maximum), which
//                         scales near 2^0 never do. CaseData::Build applies it.
#ifndef MXVAL_COMMON_INPUTS_H_
#define MXVAL_COMMON_INPUTS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mxval {

enum class GeneratorKind { kNormal, kMxfp4Exact, kHeavyTail, kUniformCodes, kExtremeScales };

struct GeneratorSpec {
  GeneratorKind kind = GeneratorKind::kNormal;
  double param = 1.0;  // sigma for normal, outlier fraction for heavy-tail
  std::string ToString() const;
};

// Parses the names above. INVALID_ARGUMENT otherwise.
absl::StatusOr<GeneratorSpec> ParseGenerator(const std::string& s);

// As ParseGenerator, for the activations: also refuses the weight-only
// extreme-scales.
absl::StatusOr<GeneratorSpec> ParseActivationGenerator(const std::string& s);

// Fills a (rows, K) view (row stride in elements) with K a multiple of 32.
// extreme-scales fills like normal (the rest is CaseData::Build's).
void FillTensor(const GeneratorSpec& spec, uint64_t seed, float* x, int64_t rows, int64_t K, int64_t row_stride);

// Special values inside K (the format's NaN and infinity rules):
//   none    finite inputs only
//   mixed   in the last batch: one NaN scale byte (0xFF) in one weight row,
//           so that output column is NaN at every M; with bf16 activations
//           also a +Inf in one x row (output +-Inf, or NaN where the weight
//           is 0), a NaN in another (a NaN row), and +Inf and -Inf in a
//           third (NaN where the two weights share a sign). The expected
//           output of each is fixed by IEEE arithmetic whatever the
//           summation order. Re-quantized (mxfp4) activations get only the
//           NaN scale: the OCP MX spec leaves converting Inf to MXFP4 to
//           the implementation.
enum class SpecialValues { kNone, kMixed };
absl::StatusOr<SpecialValues> ParseSpecialValues(const std::string& s);
inline std::string SpecialValuesName(SpecialValues v) { return v == SpecialValues::kMixed ? "mixed" : "none"; }

// Derives independent per-operand seeds from one job seed.
uint64_t OperandSeed(uint64_t seed, uint64_t operand);

}  // namespace mxval

#endif  // MXVAL_COMMON_INPUTS_H_
