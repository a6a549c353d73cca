#include "validation/validation_case.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/mxfp4/quantize.h"
#include "reference/reference_gemm.h"
#include "validation/presets.h"

namespace mxval {

namespace {

// The extreme-scales weight generator (common/inputs.h) on a built case: per
// (batch, 32-K group) one of three classes, a third each.
//  - 'tiny': every row's scale byte 0 or 1 (dequantized weights 2^-128 ..
//    1.5 * 2^-124, subnormal floats for the smallest codes); x in the group
//    +-[0.5, 2) * 2^124 so the products are about 1.
//  - 'huge': three rows in four get scale byte 253 or 254 with codes limited
//    to |e| <= 1.5 (1.5 * 2^127 is still finite in bf16); x in the group
//    +-[1, 2) * 2^-124. The other rows keep their normal scale: their
//    products are about 2^-124 and vanish, so rows of one warp differ.
//  - 'plain': unchanged.
// Guard columns and guard groups are left alone.
void ApplyExtremeScales(CaseData& d, int64_t prow, int64_t srow) {
  const GemmShape& s = d.spec.shape;
  std::mt19937_64 rng(OperandSeed(d.spec.seed, 7'000'000));
  std::uniform_real_distribution<float> mag(0.0f, 1.0f);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t g = 0; g < s.K / 32; ++g) {
      const int cls = static_cast<int>(rng() % 3);
      if (cls == 0) continue;
      const bool tiny = cls == 1;
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t k = 32 * g; k < 32 * g + 32; ++k) {
          const float sign = (rng() & 1) ? -1.0f : 1.0f;
          const float v = tiny ? std::ldexp(0.5f + 1.5f * mag(rng), 124) : std::ldexp(1.0f + mag(rng), -124);
          d.x_f32[b * d.xs.b + m * d.xs.m + k * d.xs.k] = sign * v;
        }
      for (int64_t n = 0; n < s.N; ++n) {
        uint8_t& scale = d.scales[(b * s.N + n) * srow + g];
        if (tiny) {
          scale = static_cast<uint8_t>(rng() & 1);
        } else if (rng() % 4 != 0) {
          scale = static_cast<uint8_t>(253 + (rng() & 1));
          uint8_t* codes = d.packed.data() + (b * s.N + n) * prow + 16 * g;
          for (int i = 0; i < 16; ++i) codes[i] &= 0xBB;  // magnitude index 4..7 -> 0..3 in both nibbles
        }
      }
    }
}

// The mixed special values (common/inputs.h) at positions drawn from the
// case's seed: the NaN scale in the last batch; the three x rows in the
// last three batches (row m0 of each), or, with fewer batches, in further
// rows of them. At least one output row stays finite, and some column:
// an output that is all NaN/Inf has no finite reference to check numbers
// against (the comparison calls it INVALID).
void ApplySpecials(CaseData& d, int64_t srow) {
  const GemmShape& s = d.spec.shape;
  std::mt19937_64 rng(OperandSeed(d.spec.seed, 8'000'000));
  const int64_t groups = s.K / 32;
  const int64_t n = static_cast<int64_t>(rng() % s.N), g = static_cast<int64_t>(rng() % groups);
  if (s.B * s.N >= 2) {
    d.special_b = s.B - 1;
    d.special_n = n;
    d.scales[(d.special_b * s.N + n) * srow + g] = mxfp4::kScaleNaN;
  }
  if (d.spec.activations != ActivationMode::kBf16) return;
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t m0 = static_cast<int64_t>(rng() % s.M);
  for (int64_t i = 0; i < std::min<int64_t>(3, s.B * s.M - 1); ++i) {
    const int64_t b = s.B - 1 - i % s.B, step = i / s.B;
    if (step >= s.M) break;  // fewer than three (batch, row) slots
    const int64_t m = (m0 + step) % s.M;
    auto at = [&](int64_t k) -> float& { return d.x_f32[b * d.xs.b + m * d.xs.m + k * d.xs.k]; };
    d.special_rows.push_back({b, m});
    const int64_t k = static_cast<int64_t>(rng() % s.K);
    if (i == 0) {
      at(k) = inf;
    } else if (i == 1) {
      at(k) = std::numeric_limits<float>::quiet_NaN();
    } else {
      at(k) = inf;  // and -Inf in another 32-group when there is one
      at(groups > 1 ? (k + 32) % s.K : (k + 1) % s.K) = -inf;
    }
  }
}

}  // namespace

int64_t DefaultScaleGuardGroups(int64_t K) {
  const int64_t g = K / 32;
  return 2 * (g & -g);
}

CaseSpec SpecForShape(const OpShape& shape, int64_t M) {
  CaseSpec spec;
  spec.op = shape.op;
  spec.shape = {shape.B, M, shape.N, shape.K};
  spec.layout = shape.layout;
  spec.strided_x = shape.strided_x;
  spec.x_pitch_extra = shape.x_pitch_extra;
  spec.x_layout = shape.x_layout;
  return spec;
}

absl::StatusOr<CaseData> CaseData::Build(const CaseSpec& spec, int64_t max_bytes) {
  MXVAL_RETURN_IF_ERROR(ValidateShape(spec.shape));
  if (spec.x_gen.kind == GeneratorKind::kExtremeScales) {
    return absl::InvalidArgumentError("x_gen: generator 'extreme-scales' is for the weights only");
  }
  if (spec.x_layout == XLayout::kMMajor && spec.strided_x) {
    return absl::InvalidArgumentError("shape.x_layout: m-major x has no row pitch, so not with strided_x");
  }
  const GemmShape& s = spec.shape;
  const int64_t rows_g = s.M + spec.guard_rows;
  const int64_t kstep = spec.x_layout == XLayout::kKStrided ? 2 : 1;
  const int64_t pitch = kstep * s.K + (spec.strided_x ? spec.x_pitch_extra : 0);
  // M-major x is stored (B, K + 1, M + guard rows): the row past K is a NaN
  // guard, as the row pitch is for row-major layouts with strided_x.
  const bool m_major = spec.x_layout == XLayout::kMMajor;
  const int64_t x_elems = m_major ? s.B * (s.K + 1) * rows_g : s.B * rows_g * pitch;
  const int64_t guard_groups = spec.guard_groups >= 0 ? spec.guard_groups : DefaultScaleGuardGroups(s.K);
  const int64_t prow = s.K / 2 + 16, srow = s.K / 32 + guard_groups;
  const int64_t bytes = x_elems * 6 + s.B * s.N * (prow + srow) + s.B * s.M * s.N * 6;
  if (s.B > (int64_t{1} << 20) || s.M > (int64_t{1} << 24) || s.N > (int64_t{1} << 20) || s.K > (int64_t{1} << 20) ||
      bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("case needs about ", bytes >> 20, " MiB, over the cap of ",
                                                     max_bytes >> 20, " MiB"));
  }
  CaseData d;
  d.spec = spec;
  d.x_f32.assign(x_elems, std::numeric_limits<float>::quiet_NaN());
  if (m_major) d.xs = {(s.K + 1) * rows_g, 1, rows_g};                        // memory (B, K+1, M+g)
  else if (spec.strided_x) d.xs = {pitch, s.B * pitch, kstep};                // memory (M+g, B, pitch)
  else d.xs = {rows_g * pitch, pitch, kstep};                                 // memory (B, M+g, pitch)
  for (int64_t b = 0; b < s.B; ++b) {
    // One generator stream per batch so layouts see identical values.
    std::vector<float> tmp(s.M * s.K);
    FillTensor(spec.x_gen, OperandSeed(spec.seed, 100 + b), tmp.data(), s.M, s.K, s.K);
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t k = 0; k < s.K; ++k) d.x_f32[b * d.xs.b + m * d.xs.m + k * d.xs.k] = tmp[m * s.K + k];
  }
  d.packed.assign(s.B * s.N * prow, 0xFF);
  d.scales.assign(s.B * s.N * srow, mxfp4::kScaleNaN);
  if (spec.w_packed_file || spec.w_scales_file) {
    if (!spec.w_packed_file || !spec.w_scales_file ||
        static_cast<int64_t>(spec.w_packed_file->size()) != s.B * s.N * s.K / 2 ||
        static_cast<int64_t>(spec.w_scales_file->size()) != s.B * s.N * s.K / 32) {
      return absl::InvalidArgumentError("weights from files must be dense (B, N, K/2) and (B, N, K/32) uint8");
    }
    for (int64_t r = 0; r < s.B * s.N; ++r) {
      std::copy_n(spec.w_packed_file->data() + r * s.K / 2, s.K / 2, d.packed.data() + r * prow);
      std::copy_n(spec.w_scales_file->data() + r * s.K / 32, s.K / 32, d.scales.data() + r * srow);
    }
  }
  std::vector<float> wf(spec.w_packed_file ? 0 : s.N * s.K);
  for (int64_t b = 0; b < s.B && !spec.w_packed_file; ++b) {
    FillTensor(spec.w_gen, OperandSeed(spec.seed, 1'000'000 + b), wf.data(), s.N, s.K, s.K);
    MXVAL_RETURN_IF_ERROR(mxfp4::QuantizeRows(wf.data(), s.N, s.K, s.K, spec.w_rule, d.packed.data() + b * s.N * prow,
                                              prow, d.scales.data() + b * s.N * srow, srow));
  }
  if (spec.w_gen.kind == GeneratorKind::kExtremeScales && !spec.w_packed_file) ApplyExtremeScales(d, prow, srow);
  if (spec.specials == SpecialValues::kMixed) ApplySpecials(d, srow);
  d.x_bf16.resize(x_elems);
  for (int64_t i = 0; i < x_elems; ++i) d.x_bf16[i] = mxfp4::FloatToBf16Bits(d.x_f32[i]);
  d.w = {d.packed.data(), s.N * prow, prow, d.scales.data(), s.N * srow, srow};
  d.ys = YStrides::For(s, spec.layout);
  d.y_elems = s.B * s.M * s.N;
  return d;
}

absl::StatusOr<ReferenceOutput> ComputeReference(const CaseData& d, const CheckOptions& opt) {
  const GemmShape& s = d.spec.shape;
  ReferenceOutput ref;
  reference::ReferenceOptions ropt;
  ropt.activations = d.spec.activations;
  ropt.threads = opt.threads;
  if (s.M > opt.sample_above_m) {
    ropt.rows = reference::SampleRows(s.M, opt.sample_rows, d.spec.seed);
    // The rows fed by special values are always checked.
    for (const auto& [b, m] : d.special_rows) ropt.rows.push_back(m);
    std::sort(ropt.rows.begin(), ropt.rows.end());
    ropt.rows.erase(std::unique(ropt.rows.begin(), ropt.rows.end()), ropt.rows.end());
  }
  ref.rows = ropt.rows;
  ref.want.assign(d.y_elems, 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  MXVAL_RETURN_IF_ERROR(reference::ReferenceGemm(s, d.x_f32.data(), d.xs, d.w, ref.want.data(), d.ys, ropt));
  ref.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ref;
}

namespace {

// "" when both guards around y are intact; else what was written where.
std::string GuardViolation(const std::vector<uint16_t>& buf, int64_t y_elems) {
  int64_t before = 0, after = 0, first_before = 0, last_after = 0;
  for (int64_t i = 0; i < kYGuardElems; ++i) {
    if (buf[i] != kYGuardBf16Bits) {
      if (before++ == 0) first_before = kYGuardElems - i;
    }
    if (buf[kYGuardElems + y_elems + i] != kYGuardBf16Bits) {
      ++after;
      last_after = i + 1;
    }
  }
  if (before == 0 && after == 0) return "";
  std::string r = "wrote outside y:";
  if (before > 0) absl::StrAppend(&r, " ", before, " bf16 element(s) before its first (the farthest ", first_before, " before)");
  if (after > 0) {
    absl::StrAppend(&r, before > 0 ? ";" : "", " ", after, " after its last (the farthest ", last_after, " past the end)");
  }
  absl::StrAppend(&r, " within the ", kYGuardElems, "-element guards");
  return r;
}

// When every mismatch is an output fed by the special values, says so: the
// kernel breaks the format's NaN/Inf rules rather than computing wrong
// numbers (each such output's expected value is NaN or +-Inf).
void ExplainSpecialMismatches(const CaseData& d, const std::vector<float>& got, const ReferenceOutput& ref,
                              reference::AccuracyReport* acc) {
  if (acc->special_mismatch_count == 0 || acc->special_mismatch_count != acc->mismatch_count) return;
  const GemmShape& s = d.spec.shape;
  std::string first;
  const int64_t nrows = ref.rows.empty() ? s.M : static_cast<int64_t>(ref.rows.size());
  for (int64_t b = 0; b < s.B && first.empty(); ++b)
    for (int64_t ri = 0; ri < nrows && first.empty(); ++ri) {
      const int64_t m = ref.rows.empty() ? ri : ref.rows[ri];
      for (int64_t n = 0; n < s.N; ++n) {
        const int64_t i = b * d.ys.b + m * d.ys.m + n;
        const float g = got[i], w = ref.want[i];
        if (std::isfinite(w) || (std::isnan(g) && std::isnan(w)) || g == w) continue;
        first = absl::StrCat("first at [b=", b, ", m=", m, ", n=", n, "]: got ", g, ", want ", w);
        break;
      }
    }
  acc->reason = absl::StrCat(
      "only the ", acc->special_mismatch_count, " output(s) fed by NaN/Inf inputs differ (", first,
      "): the format's rules are a NaN scale (0xFF) makes its whole group NaN, Inf x 0 is NaN, Inf - Inf is NaN; "
      "every finite output matches (inputs.specialValues: none leaves special values out)");
}

}  // namespace

absl::StatusOr<CaseResult> CheckKernel(const CaseData& d, const KernelFn& kernel, const CheckOptions& opt,
                                       const ReferenceOutput* reference) {
  const GemmShape& s = d.spec.shape;
  CaseResult res;
  // y between its guards (see kYGuardElems).
  std::vector<uint16_t> buf(d.y_elems + 2 * kYGuardElems, kYGuardBf16Bits);
  std::fill(buf.begin() + kYGuardElems, buf.end() - kYGuardElems, reference::kPoisonBf16Bits);
  uint16_t* const y = buf.data() + kYGuardElems;
  std::string out_of_bounds;
  using Clock = std::chrono::steady_clock;
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < std::max(1, opt.repetitions); ++rep) {
    const auto t0 = Clock::now();
    absl::Status st = kernel(d, y);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!st.ok()) {
      if (!st.GetPayload(kOutOfBoundsPayload).has_value()) return st;
      out_of_bounds = std::string(st.message());
      break;
    }
    res.kernel_times.push_back(dt);
    best = std::min(best, dt);
    if (out_of_bounds.empty()) out_of_bounds = GuardViolation(buf, d.y_elems);
    if (!out_of_bounds.empty()) break;
  }
  res.kernel_seconds = res.kernel_times.empty() ? 0 : best;

  std::optional<ReferenceOutput> own;
  if (reference == nullptr) {
    auto r = ComputeReference(d, opt);
    if (!r.ok()) return r.status();
    own = std::move(*r);
    reference = &*own;
  }
  res.reference_seconds = reference->seconds;
  res.rows_checked = reference->rows.empty() ? s.M : static_cast<int64_t>(reference->rows.size());

  std::vector<float> got(d.y_elems);
  for (int64_t i = 0; i < d.y_elems; ++i) got[i] = mxfp4::Bf16BitsToFloat(y[i]);
  const auto absdot = [&](int64_t b, int64_t m, int64_t n) {
    return reference::AbsDot(s, d.x_f32.data(), d.xs, d.w, d.spec.activations, b, m, n);
  };
  res.accuracy = reference::CompareOutputs(s, got.data(), d.ys, reference->want.data(), d.ys, reference->rows,
                                           opt.tolerance, absdot);
  if (!out_of_bounds.empty()) {
    res.accuracy.verdict = reference::Verdict::kFailOutOfBounds;
    res.accuracy.reason = out_of_bounds;
  } else if (res.accuracy.verdict == reference::Verdict::kFailMismatch && d.spec.specials == SpecialValues::kMixed) {
    ExplainSpecialMismatches(d, got, *reference, &res.accuracy);
  }
  return res;
}

}  // namespace mxval
