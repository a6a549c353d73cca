#include "reference/reference_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"
#include "kernels/mxfp4/mxfp4.h"

namespace mxval {
namespace reference {
namespace {

constexpr int kRows = 6;   // register tile height
constexpr int kCols = 16;  // register tile width (two 8-float vectors)

// bf16 round-to-nearest-even, written out here (not shared with kernels).
float RefBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return f;
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// out[r][0..15] = sum_k a[r][k] * wt[k][n0..n0+15], r < kRows.
// Named accumulators keep all twelve in registers.
__attribute__((target("avx2,fma"))) void Tile6x16Avx2(const float* a, int64_t K, const float* wt, int64_t ldw,
                                                      float* out) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  const float *a0 = a, *a1 = a + K, *a2 = a + 2 * K, *a3 = a + 3 * K, *a4 = a + 4 * K, *a5 = a + 5 * K;
  for (int64_t k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_loadu_ps(wt + k * ldw);
    const __m256 b1 = _mm256_loadu_ps(wt + k * ldw + 8);
    __m256 v;
    v = _mm256_broadcast_ss(a0 + k); c00 = _mm256_fmadd_ps(v, b0, c00); c01 = _mm256_fmadd_ps(v, b1, c01);
    v = _mm256_broadcast_ss(a1 + k); c10 = _mm256_fmadd_ps(v, b0, c10); c11 = _mm256_fmadd_ps(v, b1, c11);
    v = _mm256_broadcast_ss(a2 + k); c20 = _mm256_fmadd_ps(v, b0, c20); c21 = _mm256_fmadd_ps(v, b1, c21);
    v = _mm256_broadcast_ss(a3 + k); c30 = _mm256_fmadd_ps(v, b0, c30); c31 = _mm256_fmadd_ps(v, b1, c31);
    v = _mm256_broadcast_ss(a4 + k); c40 = _mm256_fmadd_ps(v, b0, c40); c41 = _mm256_fmadd_ps(v, b1, c41);
    v = _mm256_broadcast_ss(a5 + k); c50 = _mm256_fmadd_ps(v, b0, c50); c51 = _mm256_fmadd_ps(v, b1, c51);
  }
  _mm256_storeu_ps(out + 0 * kCols, c00); _mm256_storeu_ps(out + 0 * kCols + 8, c01);
  _mm256_storeu_ps(out + 1 * kCols, c10); _mm256_storeu_ps(out + 1 * kCols + 8, c11);
  _mm256_storeu_ps(out + 2 * kCols, c20); _mm256_storeu_ps(out + 2 * kCols + 8, c21);
  _mm256_storeu_ps(out + 3 * kCols, c30); _mm256_storeu_ps(out + 3 * kCols + 8, c31);
  _mm256_storeu_ps(out + 4 * kCols, c40); _mm256_storeu_ps(out + 4 * kCols + 8, c41);
  _mm256_storeu_ps(out + 5 * kCols, c50); _mm256_storeu_ps(out + 5 * kCols + 8, c51);
}

void Tile6x16Scalar(const float* a, int64_t K, const float* wt, int64_t ldw, float* out) {
  float c[kRows][kCols] = {};
  for (int64_t k = 0; k < K; ++k) {
    for (int r = 0; r < kRows; ++r) {
      const float av = a[r * K + k];
      for (int j = 0; j < kCols; ++j) c[r][j] = std::fma(av, wt[k * ldw + j], c[r][j]);
    }
  }
  std::memcpy(out, c, sizeof(c));
}

void Tile6x16Fp64(const float* a, int64_t K, const float* wt, int64_t ldw, float* out) {
  double c[kRows][kCols] = {};
  for (int64_t k = 0; k < K; ++k) {
    for (int r = 0; r < kRows; ++r) {
      const double av = a[r * K + k];
      for (int j = 0; j < kCols; ++j) c[r][j] += av * static_cast<double>(wt[k * ldw + j]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kCols; ++j) out[r * kCols + j] = static_cast<float>(c[r][j]);
}

}  // namespace

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

void FakeQuantizeGroupEven(float* v) {
  static constexpr double kGrid[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  double amax = 0.0;
  for (int i = 0; i < 32; ++i) {
    if (!std::isfinite(v[i])) {
      for (int j = 0; j < 32; ++j) v[j] = std::numeric_limits<float>::quiet_NaN();
      return;
    }
    amax = std::max(amax, std::fabs(static_cast<double>(v[i])));
  }
  if (amax == 0.0) {
    for (int i = 0; i < 32; ++i) v[i] = 0.0f;
    return;
  }
  // The "even" rule is defined on the fp32 bit pattern of amax.
  const float famax = static_cast<float>(amax);
  uint32_t bits;
  std::memcpy(&bits, &famax, 4);
  bits = (bits + 0x200000u) & 0xFF800000u;
  float rounded;
  std::memcpy(&rounded, &bits, 4);
  int e;
  if (rounded == 0.0f) {
    e = -127;
  } else if (std::isinf(rounded)) {
    e = 127;
  } else {
    int ex;
    std::frexp(static_cast<double>(rounded), &ex);  // rounded = f * 2^ex, f in [0.5, 1)
    e = std::clamp(ex - 1 - 2, -127, 127);
  }
  const double scale = std::ldexp(1.0, e);
  for (int i = 0; i < 32; ++i) {
    const double q = std::fabs(static_cast<double>(v[i])) / scale;
    int best = 7;
    if (q < 6.0) {
      best = 0;
      for (int c = 1; c < 8; ++c) {
        const double d = std::fabs(q - kGrid[c]), db = std::fabs(q - kGrid[best]);
        if (d < db || (d == db && (c % 2) == 0)) best = c;
      }
    }
    const double mag = kGrid[best] * scale;
    v[i] = static_cast<float>(std::signbit(v[i]) ? -mag : mag);
  }
}

double AbsDot(const GemmShape& s, const float* x, const XStrides& xs, const WeightView& w, ActivationMode activations,
              int64_t b, int64_t m, int64_t n) {
  std::vector<float> row(s.K);
  const float* xr = x + b * xs.b + m * xs.m;
  for (int64_t k = 0; k < s.K; ++k) row[k] = RefBf16(xr[k * xs.k]);
  if (activations == ActivationMode::kMxfp4Even) {
    for (int64_t g = 0; g < s.K; g += 32) FakeQuantizeGroupEven(&row[g]);
  }
  const uint8_t* pr = w.packed + b * w.packed_stride_b + n * w.packed_stride_n;
  const uint8_t* sr = w.scales + b * w.scale_stride_b + n * w.scale_stride_n;
  double acc = 0;
  for (int64_t k = 0; k < s.K; ++k) {
    const double wv = static_cast<double>(mxfp4::DecodeE2M1(mxfp4::UnpackCode(pr, k))) * mxfp4::DecodeE8M0(sr[k / 32]);
    acc += std::fabs(static_cast<double>(row[k]) * wv);
  }
  return acc;
}

std::vector<int64_t> SampleRows(int64_t M, int64_t count, uint64_t seed) {
  std::vector<int64_t> rows;
  auto add = [&](int64_t r) {
    if (r >= 0 && r < M) rows.push_back(r);
  };
  add(0);
  add(M - 1);
  for (int64_t t : {16, 32, 64, 128, 256}) {
    const int64_t last_tile = ((M - 1) / t) * t;
    add(last_tile);
    add(last_tile - 1);
  }
  for (int64_t edge = 256; edge < M && static_cast<int64_t>(rows.size()) < count; edge += 256) {
    add(edge - 1);
    add(edge);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, M - 1);
  const int64_t target = std::min(count, M);
  while (static_cast<int64_t>(rows.size()) < target) {
    const int64_t r = pick(rng);
    auto it = std::lower_bound(rows.begin(), rows.end(), r);
    if (it == rows.end() || *it != r) rows.insert(it, r);
  }
  return rows;
}

absl::Status ReferenceGemm(const GemmShape& s, const float* x, const XStrides& xs, const WeightView& w, float* y,
                           const YStrides& ys, const ReferenceOptions& opt) {
  if (absl::Status st = ValidateShape(s); !st.ok()) return st;
  if (x == nullptr) return absl::InvalidArgumentError("x is null");
  if (w.packed == nullptr) return absl::InvalidArgumentError("w.packed is null");
  if (w.scales == nullptr) return absl::InvalidArgumentError("w.scales is null");
  if (y == nullptr) return absl::InvalidArgumentError("y is null");
  std::vector<int64_t> all_rows;
  const std::vector<int64_t>* rows = &opt.rows;
  if (opt.rows.empty()) {
    all_rows.resize(s.M);
    for (int64_t m = 0; m < s.M; ++m) all_rows[m] = m;
    rows = &all_rows;
  } else {
    for (int64_t r : opt.rows) {
      if (r < 0 || r >= s.M) return absl::InvalidArgumentError(absl::StrCat("rows: row ", r, " is outside [0, M=", s.M, ")"));
    }
  }

  const int64_t K = s.K, N = s.N;
  // Padded by one 16-float slab so the row stride is never a multiple of
  // 4 KiB / 2 KiB: with ldw = 512 floats, a 16-column slab's K rows fell into
  // two L1 sets and the slab never stayed in L1.
  const int64_t ldw = (N + kCols - 1) / kCols * kCols + kCols;
  // Dequantized weights, transposed: wt[b][k][n], zero-padded to ldw columns.
  // Filled 16 columns at a time, k outer, so every store is contiguous; only
  // the padding columns are zeroed (no full memset of a large buffer).
  const int64_t nblocks = ldw / kCols - 1;  // the padding slab is never read
  // The buffer is kept per calling thread between calls (up to 256 MiB):
  // first-touch page faults on a fresh multi-megabyte buffer otherwise cost
  // more than the whole GEMM at small M.
  thread_local std::vector<float> workspace;
  const size_t wt_elems = static_cast<size_t>(s.B) * K * ldw;
  std::vector<float> oversized;
  std::vector<float>& wt_buf = wt_elems * sizeof(float) <= (size_t{256} << 20) ? workspace : oversized;
  if (wt_buf.size() < wt_elems) wt_buf.resize(wt_elems);
  float* const wt = wt_buf.data();
  ParallelFor(s.B * nblocks, opt.threads, [&](int64_t i, int) {
    const int64_t b = i / nblocks, n0 = (i % nblocks) * kCols;
    float* wb = wt + b * K * ldw + n0;
    const uint8_t* pr[kCols];
    const uint8_t* sr[kCols];
    const int valid = static_cast<int>(std::min<int64_t>(kCols, N - n0));
    for (int j = 0; j < valid; ++j) {
      pr[j] = w.packed + b * w.packed_stride_b + (n0 + j) * w.packed_stride_n;
      sr[j] = w.scales + b * w.scale_stride_b + (n0 + j) * w.scale_stride_n;
    }
    float lut[16];
    for (uint32_t c = 0; c < 16; ++c) lut[c] = mxfp4::DecodeE2M1(c);
    for (int64_t g = 0; g < K / 32; ++g) {
      float scale[kCols];
      for (int j = 0; j < valid; ++j) scale[j] = mxfp4::DecodeE8M0(sr[j][g]);
      for (int64_t k = g * 32; k < g * 32 + 32; k += 2) {
        float* row = wb + k * ldw;
        for (int j = 0; j < valid; ++j) {
          const uint8_t byte = pr[j][k / 2];
          row[j] = lut[byte & 0xFu] * scale[j];
          row[ldw + j] = lut[byte >> 4] * scale[j];
        }
        for (int j = valid; j < kCols; ++j) row[j] = row[ldw + j] = 0.0f;
      }
    }
  });

  const bool avx = HasAvx2Fma() && !opt.force_scalar && !opt.fp64_accumulate;
  // A task is up to kTaskRows rows of one batch; within it each 16-column
  // slab of wt is loaded once into L1 and used by every 6-row tile.
  constexpr int64_t kTaskRows = 8 * kRows;
  const int64_t nrows = static_cast<int64_t>(rows->size());
  const int64_t tasks_per_b = (nrows + kTaskRows - 1) / kTaskRows;
  const int threads = EffectiveThreads(s.B * tasks_per_b, opt.threads);
  std::vector<std::vector<float>> scratch(threads, std::vector<float>(kTaskRows * K + kRows * kCols));
  ParallelFor(s.B * tasks_per_b, threads, [&](int64_t i, int tid) {
    const int64_t b = i / tasks_per_b, r0 = (i % tasks_per_b) * kTaskRows;
    const int64_t nr = std::min<int64_t>(kTaskRows, nrows - r0);
    const int64_t tiles = (nr + kRows - 1) / kRows;
    float* a = scratch[tid].data();
    float* out = a + kTaskRows * K;
    for (int64_t r = 0; r < tiles * kRows; ++r) {
      float* ar = a + r * K;
      if (r >= nr) {
        std::fill(ar, ar + K, 0.0f);
        continue;
      }
      const float* xr = x + b * xs.b + (*rows)[r0 + r] * xs.m;
      for (int64_t k = 0; k < K; ++k) ar[k] = RefBf16(xr[k * xs.k]);
      if (opt.activations == ActivationMode::kMxfp4Even) {
        for (int64_t g = 0; g < K; g += 32) FakeQuantizeGroupEven(ar + g);
      }
    }
    const float* wb = wt + b * K * ldw;
    for (int64_t n0 = 0; n0 < N; n0 += kCols) {
      const int nc = static_cast<int>(std::min<int64_t>(kCols, N - n0));
      for (int64_t t = 0; t < tiles; ++t) {
        const float* at = a + t * kRows * K;
        if (opt.fp64_accumulate) Tile6x16Fp64(at, K, wb + n0, ldw, out);
        else if (avx) Tile6x16Avx2(at, K, wb + n0, ldw, out);
        else Tile6x16Scalar(at, K, wb + n0, ldw, out);
        for (int r = 0; r < kRows && t * kRows + r < nr; ++r) {
          float* yr = y + b * ys.b + (*rows)[r0 + t * kRows + r] * ys.m + n0;
          std::memcpy(yr, out + r * kCols, nc * sizeof(float));
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace reference
}  // namespace mxval
