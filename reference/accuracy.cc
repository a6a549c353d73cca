#include "reference/accuracy.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mxval {
namespace reference {

bool IsPoison(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return (u >> 16) == kPoisonBf16Bits;
}

float PoisonF32() {
  float f;
  std::memcpy(&f, &kPoisonF32Bits, 4);
  return f;
}

std::string VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kFailMismatch: return "fail: mismatch";
    case Verdict::kFailNonFinite: return "fail: non-finite";
    case Verdict::kFailUnwritten: return "fail: unwritten";
    case Verdict::kFailCatastrophic: return "fail: catastrophic";
    case Verdict::kInvalid: return "invalid";
    case Verdict::kFailOutOfBounds: return "fail: out of bounds";
  }
  return "?";
}

AccuracyReport CompareOutputs(const GemmShape& s, const float* got, const YStrides& gs, const float* want,
                              const YStrides& ws, const std::vector<int64_t>& rows, const Tolerance& tol,
                              const AbsDotFn& absdot) {
  const double accum_scale = tol.accum_sigma * std::sqrt(static_cast<double>(s.K)) * std::ldexp(1.0, -24);
  AccuracyReport rep;
  double diff2 = 0, want2 = 0, got2 = 0, dot = 0;
  ElementError first_unwritten, first_nonfinite;
  const int64_t nrows = rows.empty() ? s.M : static_cast<int64_t>(rows.size());
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t ri = 0; ri < nrows; ++ri) {
      const int64_t m = rows.empty() ? ri : rows[ri];
      const float* g = got + b * gs.b + m * gs.m;
      const float* w = want + b * ws.b + m * ws.m;
      for (int64_t n = 0; n < s.N; ++n) {
        ++rep.checked;
        const float gv = g[n], wv = w[n];
        bool bad = false;
        if (IsPoison(gv)) {
          if (rep.unwritten_count++ == 0) first_unwritten = {b, m, n, gv, wv};
          bad = true;
        } else if (!std::isfinite(wv)) {
          // Reference non-finite: output must be the same non-finite value.
          bad = !((std::isnan(wv) && std::isnan(gv)) || gv == wv);
          rep.special_mismatch_count += bad;
        } else if (!std::isfinite(gv)) {
          if (std::isnan(gv)) ++rep.nan_count;
          else ++rep.inf_count;
          if (rep.nan_count + rep.inf_count == 1) first_nonfinite = {b, m, n, gv, wv};
          bad = true;
        } else {
          const double d = std::fabs(static_cast<double>(gv) - wv);
          const double aw = std::fabs(static_cast<double>(wv));
          rep.max_abs_err = std::max(rep.max_abs_err, d);
          if (aw > 0) rep.max_rel_err = std::max(rep.max_rel_err, d / aw);
          diff2 += d * d;
          want2 += aw * aw;
          got2 += static_cast<double>(gv) * gv;
          dot += static_cast<double>(gv) * wv;
          bad = d > tol.atol + tol.rtol * aw;
          if (bad && absdot && accum_scale > 0 && d <= tol.atol + tol.rtol * aw + accum_scale * absdot(b, m, n)) {
            bad = false;
            ++rep.accumulation_allowed;
          }
        }
        if (bad) {
          ++rep.mismatch_count;
          if (rep.first_mismatches.size() < 8) rep.first_mismatches.push_back({b, m, n, gv, wv});
        }
      }
    }
  }
  rep.ref_norm = std::sqrt(want2);
  rep.rel_fro_err = want2 > 0 ? std::sqrt(diff2 / want2) : (diff2 > 0 ? INFINITY : 0.0);
  rep.cosine = (want2 > 0 && got2 > 0) ? dot / std::sqrt(want2 * got2) : 0.0;
  rep.mismatch_fraction = rep.checked ? static_cast<double>(rep.mismatch_count) / rep.checked : 0.0;

  if (rep.unwritten_count > 0) {
    rep.verdict = Verdict::kFailUnwritten;
    rep.reason = absl::StrFormat("%d of %d outputs never written (poison left), first at [b=%d, m=%d, n=%d]",
                                 rep.unwritten_count, rep.checked, first_unwritten.b, first_unwritten.m,
                                 first_unwritten.n);
  } else if (rep.nan_count + rep.inf_count > 0) {
    rep.verdict = Verdict::kFailNonFinite;
    rep.reason = absl::StrFormat("%d NaN and %d Inf outputs where the reference is finite, first at [b=%d, m=%d, n=%d]",
                                 rep.nan_count, rep.inf_count, first_nonfinite.b, first_nonfinite.m,
                                 first_nonfinite.n);
  } else if (rep.ref_norm == 0) {
    rep.verdict = Verdict::kInvalid;
    rep.reason = "reference norm is zero: an all-zero output would pass; use non-zero inputs";
  } else if (rep.rel_fro_err > tol.catastrophic_rel_fro || rep.cosine < tol.catastrophic_cosine) {
    rep.verdict = Verdict::kFailCatastrophic;
    rep.reason = absl::StrFormat("relative Frobenius error %.3g, cosine %.6f: the output is a different function",
                                 rep.rel_fro_err, rep.cosine);
  } else if (rep.mismatch_count > 0 &&
             (rep.mismatch_fraction > tol.max_mismatch_fraction || rep.special_mismatch_count > 0)) {
    const ElementError& e = rep.first_mismatches.front();
    rep.verdict = Verdict::kFailMismatch;
    rep.reason = absl::StrFormat(
        "%d of %d elements (%.3g%%) outside atol=%g rtol=%g; max abs %.3g, first at [b=%d, m=%d, n=%d] got %g want %g",
        rep.mismatch_count, rep.checked, 100.0 * rep.mismatch_fraction, tol.atol, tol.rtol, rep.max_abs_err, e.b, e.m,
        e.n, e.got, e.want);
  } else {
    rep.verdict = Verdict::kPass;
    rep.reason = absl::StrFormat("max abs %.3g, max rel %.3g, rel fro %.3g", rep.max_abs_err, rep.max_rel_err,
                                 rep.rel_fro_err);
    if (rep.accumulation_allowed > 0) {
      absl::StrAppend(&rep.reason, absl::StrFormat("; %d near-cancelling element(s) within the fp32 accumulation bound",
                                                   rep.accumulation_allowed));
    }
  }
  return rep;
}

}  // namespace reference
}  // namespace mxval
