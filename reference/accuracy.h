// Accuracy metrics and a verdict for a kernel output against the reference.
//
// Closeness follows torch.testing.assert_close: |got - want| <= atol +
// rtol * |want| (bf16 defaults rtol 1.6e-2, atol 1e-5). Where the reference
// itself is non-finite (e.g. a NaN scale inside K), the output must match it
// (NaN == NaN, inf == inf of the same sign): equal_nan semantics.
//
// Unwritten outputs: before a kernel runs, its output is filled with a
// signalling-NaN poison (fp32 0x7FA5A5A5, bf16 0x7FA5). Arithmetic never
// produces it (hardware NaNs are quiet), so any poison left afterwards is an
// element the kernel did not write.
#ifndef MXVAL_REFERENCE_ACCURACY_H_
#define MXVAL_REFERENCE_ACCURACY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/gemm_problem.h"

namespace mxval {
namespace reference {

inline constexpr uint32_t kPoisonF32Bits = 0x7FA5A5A5u;
inline constexpr uint16_t kPoisonBf16Bits = 0x7FA5u;
// True for both the fp32 poison and a bf16 poison widened to fp32.
bool IsPoison(float v);
float PoisonF32();

struct Tolerance {
  double atol = 1e-5;
  double rtol = 1.6e-2;
  // An element outside (atol, rtol) is still accepted when the difference is
  // within accum_sigma * sqrt(K) * 2^-24 * sum_k |x_k w_k|: the spread that
  // fp32 accumulation in a different order legitimately produces where the
  // sum nearly cancels (|y| << sum |x w|). Needs an AbsDotFn; such elements
  // are counted in AccuracyReport::accumulation_allowed. 0 disables.
  double accum_sigma = 4.0;
  // Fraction of checked elements allowed outside (atol, rtol). 0: none.
  double max_mismatch_fraction = 0.0;
  // Relative Frobenius error above this, or cosine below catastrophic_cosine,
  // is "catastrophic" (wrong function, not rounding).
  double catastrophic_rel_fro = 0.1;
  double catastrophic_cosine = 0.99;
};

enum class Verdict {
  kPass = 0,
  kFailMismatch = 1,
  kFailNonFinite = 2,
  kFailUnwritten = 3,
  kFailCatastrophic = 4,
  kInvalid = 5,  // the check itself is meaningless (reference norm is zero)
  kFailOutOfBounds = 6,  // wrote outside y or past its workspace (validation's guard check)
};
std::string VerdictName(Verdict v);  // "pass", "fail: mismatch", ...

struct ElementError {
  int64_t b = 0, m = 0, n = 0;
  float got = 0, want = 0;
};

struct AccuracyReport {
  int64_t checked = 0;           // elements compared
  double max_abs_err = 0;        // over finite pairs
  double max_rel_err = 0;        // |got - want| / |want| over finite pairs, want != 0
  double rel_fro_err = 0;        // ||got - want||_F / ||want||_F
  double cosine = 0;             // <got, want> / (||got|| ||want||)
  double ref_norm = 0;           // ||want||_F over finite reference entries
  int64_t nan_count = 0;         // NaN in output where the reference is finite
  int64_t inf_count = 0;         // Inf in output where the reference is finite
  int64_t unwritten_count = 0;   // poison left in output
  int64_t mismatch_count = 0;    // outside tolerance (includes the above)
  // Where the reference is NaN or +-Inf (special values inside K) and the
  // output is not the same: the format's rules broken. Never tolerated by
  // max_mismatch_fraction. Included in mismatch_count.
  int64_t special_mismatch_count = 0;
  int64_t accumulation_allowed = 0;  // outside (atol, rtol) but within the fp32 accumulation bound
  double mismatch_fraction = 0;
  std::vector<ElementError> first_mismatches;  // up to 8, in index order
  Verdict verdict = Verdict::kPass;
  std::string reason;            // one line, human readable
};

// sum_k |x_k * w_k| for output element (b, m, n), as the reference sees the
// operands (see reference::AbsDot).
using AbsDotFn = std::function<double(int64_t b, int64_t m, int64_t n)>;

// Compares got and want over all b, n and the given rows m (empty = all M).
// Both are (B, M, N) views with n contiguous and the given strides. absdot
// (optional) enables the accumulation-order allowance of Tolerance.
AccuracyReport CompareOutputs(const GemmShape& shape, const float* got, const YStrides& got_strides,
                              const float* want, const YStrides& want_strides, const std::vector<int64_t>& rows,
                              const Tolerance& tol, const AbsDotFn& absdot = nullptr);

}  // namespace reference
}  // namespace mxval

#endif  // MXVAL_REFERENCE_ACCURACY_H_
