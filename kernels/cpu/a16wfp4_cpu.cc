#include "kernels/cpu/a16wfp4_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"
#include "kernels/cpu/convert.h"
#include "kernels/mxfp4/mxfp4.h"

namespace mxval {
namespace cpu {
namespace {

constexpr int kMr = 6;   // micro-tile rows
constexpr int kNr = 16;  // micro-tile columns

bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// c[6 x 16] (+)= a[6 rows, stride lda][kc] * bp[kc x 16] (packed panel);
// ldc = row stride of c. Twelve named accumulators (not an array) so they
// stay in ymm registers.
__attribute__((target("avx2,fma"))) void Micro6x16Avx2(int64_t kc, const float* ap, int64_t lda, const float* bp,
                                                       float* c, int64_t ldc, bool accumulate) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (accumulate) {
    c00 = _mm256_loadu_ps(c + 0 * ldc); c01 = _mm256_loadu_ps(c + 0 * ldc + 8);
    c10 = _mm256_loadu_ps(c + 1 * ldc); c11 = _mm256_loadu_ps(c + 1 * ldc + 8);
    c20 = _mm256_loadu_ps(c + 2 * ldc); c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
    c30 = _mm256_loadu_ps(c + 3 * ldc); c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
    c40 = _mm256_loadu_ps(c + 4 * ldc); c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
    c50 = _mm256_loadu_ps(c + 5 * ldc); c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
  } else {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(bp);
    const __m256 b1 = _mm256_load_ps(bp + 8);
    __m256 a;
    a = _mm256_broadcast_ss(ap + k); c00 = _mm256_fmadd_ps(a, b0, c00); c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(ap + lda + k); c10 = _mm256_fmadd_ps(a, b0, c10); c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(ap + 2 * lda + k); c20 = _mm256_fmadd_ps(a, b0, c20); c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(ap + 3 * lda + k); c30 = _mm256_fmadd_ps(a, b0, c30); c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(ap + 4 * lda + k); c40 = _mm256_fmadd_ps(a, b0, c40); c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(ap + 5 * lda + k); c50 = _mm256_fmadd_ps(a, b0, c50); c51 = _mm256_fmadd_ps(a, b1, c51);
    bp += kNr;
  }
  _mm256_storeu_ps(c + 0 * ldc, c00); _mm256_storeu_ps(c + 0 * ldc + 8, c01);
  _mm256_storeu_ps(c + 1 * ldc, c10); _mm256_storeu_ps(c + 1 * ldc + 8, c11);
  _mm256_storeu_ps(c + 2 * ldc, c20); _mm256_storeu_ps(c + 2 * ldc + 8, c21);
  _mm256_storeu_ps(c + 3 * ldc, c30); _mm256_storeu_ps(c + 3 * ldc + 8, c31);
  _mm256_storeu_ps(c + 4 * ldc, c40); _mm256_storeu_ps(c + 4 * ldc + 8, c41);
  _mm256_storeu_ps(c + 5 * ldc, c50); _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

void Micro6x16Scalar(int64_t kc, const float* ap, int64_t lda, const float* bp, float* c, int64_t ldc,
                     bool accumulate) {
  float acc[kMr][kNr];
  for (int r = 0; r < kMr; ++r)
    for (int j = 0; j < kNr; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  for (int64_t k = 0; k < kc; ++k, bp += kNr)
    for (int r = 0; r < kMr; ++r)
      for (int j = 0; j < kNr; ++j) acc[r][j] = __builtin_fmaf(ap[r * lda + k], bp[j], acc[r][j]);
  for (int r = 0; r < kMr; ++r)
    for (int j = 0; j < kNr; ++j) c[r * ldc + j] = acc[r][j];
}

// Dequantizes w[b, n0:n0+16*slabs, k0:k0+kc] into a panel laid out
// [slab][ldk][16] starting at k offset (k0 - kbase) within each slab;
// columns at or past N are zero. k0 and kc are multiples of 32.
void PackWeights(const WeightView& w, int64_t b, int64_t n0, int slabs, int64_t N, int64_t k0, int64_t kc,
                 int64_t kbase, int64_t ldk, float* panel) {
  float lut[16];
  for (uint32_t c = 0; c < 16; ++c) lut[c] = mxfp4::DecodeE2M1(c);
  for (int sl = 0; sl < slabs; ++sl) {
    const uint8_t* prow[kNr];
    const uint8_t* srow[kNr];
    static const uint8_t kZeroRow[2048 + 128] = {};  // code 0 / any scale -> 0
    for (int j = 0; j < kNr; ++j) {
      const int64_t n = n0 + sl * kNr + j;
      prow[j] = n < N ? w.packed + b * w.packed_stride_b + n * w.packed_stride_n + k0 / 2 : kZeroRow;
      srow[j] = n < N ? w.scales + b * w.scale_stride_b + n * w.scale_stride_n + k0 / 32 : kZeroRow;
    }
    float* dst = panel + static_cast<int64_t>(sl) * ldk * kNr + (k0 - kbase) * kNr;
    for (int64_t g = 0; g < kc / 32; ++g) {
      float scale[kNr];
      for (int j = 0; j < kNr; ++j) scale[j] = mxfp4::DecodeE8M0(srow[j][g]);
      for (int i = 0; i < 16; ++i) {
        float* d0 = dst + (g * 32 + 2 * i) * kNr;
        for (int j = 0; j < kNr; ++j) {
          const uint8_t byte = prow[j][g * 16 + i];
          d0[j] = lut[byte & 0xFu] * scale[j];
          d0[kNr + j] = lut[byte >> 4] * scale[j];
        }
      }
    }
  }
}

// Converts x[b, m0:m0+rows, k0:k0+kc] (bf16) into rows of `a` (row stride
// lda, column offset k0 - kbase); rows from `rows` up to a multiple of 6 are
// zero. In mxfp4-even mode each 32-K group is re-quantized.
void PackActivations(const CpuGemmArgs& args, bool avx, int64_t b, int64_t m0, int rows, int64_t k0, int64_t kc,
                     int64_t kbase, int64_t lda, float* a) {
  uint8_t codes[32];
  const int padded = (rows + kMr - 1) / kMr * kMr;
  for (int r = 0; r < padded; ++r) {
    float* dst = a + static_cast<int64_t>(r) * lda + (k0 - kbase);
    if (r >= rows) {
      std::fill(dst, dst + kc, 0.0f);
      continue;
    }
    const uint16_t* xr = args.x + b * args.xs.b + (m0 + r) * args.xs.m + k0 * args.xs.k;
    if (args.xs.k == 1 && avx) {
      Bf16ToFloatAvx2(xr, kc, dst);
    } else {
      for (int64_t k = 0; k < kc; ++k) dst[k] = mxfp4::Bf16BitsToFloat(xr[k * args.xs.k]);
    }
    if (args.activations == ActivationMode::kMxfp4Even) {
      for (int64_t g = 0; g < kc; g += 32) {
        const float s = mxfp4::DecodeE8M0(mxfp4::QuantizeBlock(dst + g, 1, 32, mxfp4::ScaleRule::kEven, codes));
        for (int i = 0; i < 32; ++i) dst[g + i] = mxfp4::DecodeE2M1(codes[i]) * s;
      }
    }
  }
}

}  // namespace

absl::Status CanImplement(const GemmShape& s, const TileConfig& c) {
  if (absl::Status st = ValidateShape(s); !st.ok()) return st;
  if (c.block_m < 1 || c.block_m > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("BLOCK_SIZE_M = ", c.block_m, " must be in [1, 1024]"));
  }
  if (c.block_n < kNr || c.block_n > 1024 || c.block_n % kNr != 0) {
    return absl::InvalidArgumentError(absl::StrCat("BLOCK_SIZE_N = ", c.block_n, " must be a multiple of 16 in [16, 1024]"));
  }
  if (c.block_k < 32 || c.block_k > 4096 || c.block_k % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("BLOCK_SIZE_K = ", c.block_k, " must be a multiple of 32 in [32, 4096]"));
  }
  const int64_t kblocks = (s.K + c.block_k - 1) / c.block_k;
  if (c.ksplit < 1 || c.ksplit > kblocks) {
    return absl::InvalidArgumentError(absl::StrCat("NUM_KSPLIT = ", c.ksplit, " must be in [1, ceil(K / BLOCK_SIZE_K) = ",
                                                   kblocks, "] for K = ", s.K));
  }
  return absl::OkStatus();
}

absl::Status RunA16WFP4(const CpuGemmArgs& a, const TileConfig& c) {
  if (absl::Status st = CanImplement(a.shape, c); !st.ok()) return st;
  if (a.x == nullptr || a.w.packed == nullptr || a.w.scales == nullptr || a.y == nullptr) {
    return absl::InvalidArgumentError("x, w.packed, w.scales and y must be non-null");
  }
  const GemmShape& s = a.shape;
  const int64_t kblocks = (s.K + c.block_k - 1) / c.block_k;
  const int64_t mtiles = (s.M + c.block_m - 1) / c.block_m;
  const int64_t nslabs_total = (s.N + kNr - 1) / kNr;
  // Programs: (batch, K split, M group). Each dequantizes its batch's weight
  // panel for its K range once and reuses it across all of its M tiles; M is
  // grouped only as far as needed to give every thread work.
  const int threads = a.threads > 0 ? a.threads : DefaultThreadCount();
  const int64_t outer = s.B * c.ksplit;
  const int64_t groups = std::min<int64_t>(mtiles, std::max<int64_t>(1, (4 * threads + outer - 1) / outer));
  const int64_t tiles_per_group = (mtiles + groups - 1) / groups;
  const int64_t programs = outer * groups;

  std::vector<float> partial;
  if (c.ksplit > 1) partial.resize(static_cast<size_t>(c.ksplit) * s.B * s.M * s.N);
  const bool avx = CpuHasAvx2Fma() && !a.force_scalar;
  const int nthreads = EffectiveThreads(programs, threads);
  const int64_t max_krange = std::min<int64_t>(s.K, (kblocks + c.ksplit - 1) / c.ksplit * c.block_k);
  const int64_t a_rows = (c.block_m + kMr - 1) / kMr * kMr;
  const int64_t ldc = nslabs_total * kNr;
  struct Scratch {
    std::vector<float> wpanel, apanel, ctile;
  };
  std::vector<Scratch> scratch(nthreads);
  for (Scratch& sc : scratch) {
    sc.wpanel.resize(nslabs_total * kNr * max_krange + 16);
    sc.apanel.resize(a_rows * max_krange);
    sc.ctile.resize(a_rows * ldc);
  }

  ParallelFor(programs, nthreads, [&](int64_t pid, int tid) {
    const int64_t g = pid % groups;
    const int64_t split = (pid / groups) % c.ksplit;
    const int64_t b = pid / groups / c.ksplit;
    const int64_t kb0 = split * kblocks / c.ksplit, kb1 = (split + 1) * kblocks / c.ksplit;
    const int64_t kbeg = kb0 * c.block_k, kend = std::min<int64_t>(s.K, kb1 * c.block_k);
    const int64_t krange = kend - kbeg;
    Scratch& sc = scratch[tid];
    // 64-byte alignment for the aligned panel loads.
    float* wpanel = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(sc.wpanel.data()) + 63) & ~uintptr_t{63});
    float* apanel = sc.apanel.data();
    float* ctile = sc.ctile.data();

    // Dequantize this program's weights once, BLOCK_K at a time (the last
    // block is ragged when K is not a multiple of BLOCK_K: masked to K).
    for (int64_t k0 = kbeg; k0 < kend; k0 += c.block_k) {
      const int64_t kc = std::min<int64_t>(c.block_k, kend - k0);
      PackWeights(a.w, b, 0, static_cast<int>(nslabs_total), s.N, k0, kc, kbeg, krange, wpanel);
    }
    for (int64_t mt = g * tiles_per_group; mt < std::min(mtiles, (g + 1) * tiles_per_group); ++mt) {
      const int64_t m0 = mt * c.block_m;
      const int rows = static_cast<int>(std::min<int64_t>(c.block_m, s.M - m0));
      const int mslabs = (rows + kMr - 1) / kMr;
      for (int64_t k0 = kbeg; k0 < kend; k0 += c.block_k) {
        PackActivations(a, avx, b, m0, rows, k0, std::min<int64_t>(c.block_k, kend - k0), kbeg, krange, apanel);
      }
      // BLOCK_N columns at a time: that slice of the panel stays in cache
      // while every 6-row slab of the M tile streams past it.
      for (int64_t n0 = 0; n0 < s.N; n0 += c.block_n) {
        const int64_t j1 = std::min<int64_t>(nslabs_total, (n0 + c.block_n) / kNr);
        for (int64_t k0 = kbeg; k0 < kend; k0 += std::max<int64_t>(c.block_k, 256)) {
          const int64_t kc = std::min<int64_t>(std::max<int64_t>(c.block_k, 256), kend - k0);
          for (int64_t j = n0 / kNr; j < j1; ++j) {
            const float* bp = wpanel + j * kNr * krange + (k0 - kbeg) * kNr;
            for (int i = 0; i < mslabs; ++i) {
              const float* ap = apanel + static_cast<int64_t>(i) * kMr * krange + (k0 - kbeg);
              float* cp = ctile + static_cast<int64_t>(i) * kMr * ldc + j * kNr;
              if (avx) Micro6x16Avx2(kc, ap, krange, bp, cp, ldc, k0 != kbeg);
              else Micro6x16Scalar(kc, ap, krange, bp, cp, ldc, k0 != kbeg);
            }
          }
        }
      }
      for (int r = 0; r < rows; ++r) {
        const float* cr = ctile + static_cast<int64_t>(r) * ldc;
        if (c.ksplit == 1) {
          uint16_t* yr = a.y + b * a.ys.b + (m0 + r) * a.ys.m;
          if (avx) {
            FloatToBf16RowAvx2(cr, s.N, yr);
          } else {
            for (int64_t n = 0; n < s.N; ++n) yr[n] = mxfp4::FloatToBf16Bits(cr[n]);
          }
        } else {
          float* pr = partial.data() + ((split * s.B + b) * s.M + m0 + r) * s.N;
          std::memcpy(pr, cr, s.N * sizeof(float));
        }
      }
    }
  });

  if (c.ksplit > 1) {
    // Reduce step: sum the splits in order (deterministic), round to bf16.
    ParallelFor(s.B * s.M, threads, [&](int64_t i, int) {
      const int64_t b = i / s.M, m = i % s.M;
      uint16_t* yr = a.y + b * a.ys.b + m * a.ys.m;
      for (int64_t n = 0; n < s.N; ++n) {
        float acc = 0.0f;
        for (int sp = 0; sp < c.ksplit; ++sp) acc += partial[((sp * s.B + b) * s.M + m) * s.N + n];
        yr[n] = mxfp4::FloatToBf16Bits(acc);
      }
    });
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace mxval
