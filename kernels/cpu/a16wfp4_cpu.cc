#include "kernels/cpu/a16wfp4_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"
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

// c[6 x 16] (+)= ap[kc x 6]^T-packed * bp[kc x 16]; ldc = row stride of c.
__attribute__((target("avx2,fma"))) void Micro6x16Avx2(int64_t kc, const float* ap, const float* bp, float* c,
                                                       int64_t ldc, bool accumulate) {
  __m256 acc[kMr][2];
  for (int r = 0; r < kMr; ++r) {
    acc[r][0] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
    acc[r][1] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(bp);
    const __m256 b1 = _mm256_load_ps(bp + 8);
    _mm_prefetch(reinterpret_cast<const char*>(bp + 8 * kNr), _MM_HINT_T0);
#pragma GCC unroll 6
    for (int r = 0; r < kMr; ++r) {
      const __m256 a = _mm256_broadcast_ss(ap + r);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
    ap += kMr;
    bp += kNr;
  }
  for (int r = 0; r < kMr; ++r) {
    _mm256_storeu_ps(c + r * ldc, acc[r][0]);
    _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
  }
}

void Micro6x16Scalar(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate) {
  float acc[kMr][kNr];
  for (int r = 0; r < kMr; ++r)
    for (int j = 0; j < kNr; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  for (int64_t k = 0; k < kc; ++k, ap += kMr, bp += kNr)
    for (int r = 0; r < kMr; ++r)
      for (int j = 0; j < kNr; ++j) acc[r][j] = __builtin_fmaf(ap[r], bp[j], acc[r][j]);
  for (int r = 0; r < kMr; ++r)
    for (int j = 0; j < kNr; ++j) c[r * ldc + j] = acc[r][j];
}

// Dequantizes w[b, n0:n0+bn, k0:k0+kc] into panel layout [bn/16][kc][16];
// columns at or past N are zero. k0 and kc are multiples of 32.
void PackWeights(const WeightView& w, int64_t b, int64_t n0, int bn, int64_t N, int64_t k0, int64_t kc, float* panel) {
  for (int j0 = 0; j0 < bn; j0 += kNr) {
    float* dst = panel + static_cast<int64_t>(j0) * kc;
    for (int j = 0; j < kNr; ++j) {
      const int64_t n = n0 + j0 + j;
      if (n >= N) {
        for (int64_t k = 0; k < kc; ++k) dst[k * kNr + j] = 0.0f;
        continue;
      }
      const uint8_t* pr = w.packed + b * w.packed_stride_b + n * w.packed_stride_n + k0 / 2;
      const uint8_t* sr = w.scales + b * w.scale_stride_b + n * w.scale_stride_n + k0 / 32;
      for (int64_t g = 0; g < kc / 32; ++g) {
        const float scale = mxfp4::DecodeE8M0(sr[g]);
        for (int i = 0; i < 16; ++i) {
          const uint8_t byte = pr[g * 16 + i];
          dst[(g * 32 + 2 * i) * kNr + j] = mxfp4::DecodeE2M1(byte & 0xFu) * scale;
          dst[(g * 32 + 2 * i + 1) * kNr + j] = mxfp4::DecodeE2M1(byte >> 4) * scale;
        }
      }
    }
  }
}

// Converts x[b, m0:m0+rows, k0:k0+kc] (bf16) into panel [ceil(rows/6)][kc][6],
// zero rows past `rows`; in mxfp4-even mode each 32-K group is re-quantized.
void PackActivations(const CpuGemmArgs& a, int64_t b, int64_t m0, int rows, int64_t k0, int64_t kc, float* panel) {
  float row[4096];
  uint8_t codes[32];
  const int slabs = (rows + kMr - 1) / kMr;
  for (int r = 0; r < slabs * kMr; ++r) {
    float* dst = panel + static_cast<int64_t>(r / kMr) * kc * kMr + (r % kMr);
    if (r >= rows) {
      for (int64_t k = 0; k < kc; ++k) dst[k * kMr] = 0.0f;
      continue;
    }
    const uint16_t* xr = a.x + b * a.xs.b + (m0 + r) * a.xs.m + k0 * a.xs.k;
    for (int64_t k = 0; k < kc; ++k) row[k] = mxfp4::Bf16BitsToFloat(xr[k * a.xs.k]);
    if (a.activations == ActivationMode::kMxfp4Even) {
      for (int64_t g = 0; g < kc; g += 32) {
        const float s = mxfp4::DecodeE8M0(mxfp4::QuantizeBlock(row + g, 1, 32, mxfp4::ScaleRule::kEven, codes));
        for (int i = 0; i < 32; ++i) row[g + i] = mxfp4::DecodeE2M1(codes[i]) * s;
      }
    }
    for (int64_t k = 0; k < kc; ++k) dst[k * kMr] = row[k];
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
  const int64_t ntiles = (s.N + c.block_n - 1) / c.block_n;
  const int64_t mtiles = (s.M + c.block_m - 1) / c.block_m;
  // Group M tiles so that there are enough programs to feed every thread,
  // while each program still reuses its dequantized weight panel across
  // as many M tiles as possible.
  const int threads = a.threads > 0 ? a.threads : DefaultThreadCount();
  const int64_t outer = s.B * ntiles * c.ksplit;
  const int64_t groups = std::min<int64_t>(mtiles, std::max<int64_t>(1, (4 * threads + outer - 1) / outer));
  const int64_t tiles_per_group = (mtiles + groups - 1) / groups;
  const int64_t programs = outer * groups;

  std::vector<float> partial;
  if (c.ksplit > 1) partial.resize(static_cast<size_t>(c.ksplit) * s.B * s.M * s.N);
  const bool avx = CpuHasAvx2Fma() && !a.force_scalar;
  const int nthreads = EffectiveThreads(programs, threads);
  const int64_t max_kc = std::min<int64_t>(c.block_k, s.K);
  const int64_t panel_k = std::min<int64_t>(s.K, (kblocks + c.ksplit - 1) / c.ksplit * c.block_k);
  const int64_t a_slabs = (c.block_m + kMr - 1) / kMr;
  struct Scratch {
    std::vector<float, std::allocator<float>> wpanel, apanel, ctile;
  };
  std::vector<Scratch> scratch(nthreads);
  for (Scratch& sc : scratch) {
    sc.wpanel.resize(panel_k * c.block_n + 16);
    sc.apanel.resize(a_slabs * kMr * max_kc + 16);
    sc.ctile.resize(a_slabs * kMr * c.block_n + 16);
  }

  ParallelFor(programs, nthreads, [&](int64_t pid, int tid) {
    int64_t rest = pid;
    const int64_t g = rest % groups;
    rest /= groups;
    const int64_t split = rest % c.ksplit;
    rest /= c.ksplit;
    const int64_t nt = rest % ntiles;
    const int64_t b = rest / ntiles;
    const int64_t kb0 = split * kblocks / c.ksplit, kb1 = (split + 1) * kblocks / c.ksplit;
    const int64_t kbeg = kb0 * c.block_k, kend = std::min<int64_t>(s.K, kb1 * c.block_k);
    const int64_t n0 = nt * c.block_n;
    const int ncols = static_cast<int>(std::min<int64_t>(c.block_n, s.N - n0));
    const int nslabs = (ncols + kNr - 1) / kNr;
    Scratch& sc = scratch[tid];
    // 16-byte alignment for the aligned panel loads.
    float* wpanel = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(sc.wpanel.data()) + 63) & ~uintptr_t{63});
    float* apanel = sc.apanel.data();
    float* ctile = sc.ctile.data();
    const int64_t ldc = c.block_n;

    // Dequantize this program's weight tile once: [kblock][slab][kc][16].
    PackWeights(a.w, b, n0, nslabs * kNr, s.N, kbeg, kend - kbeg, wpanel);
    // PackWeights above lays out [slab][K range][16]; index by (slab, k).
    const int64_t krange = kend - kbeg;

    for (int64_t mt = g * tiles_per_group; mt < std::min(mtiles, (g + 1) * tiles_per_group); ++mt) {
      const int64_t m0 = mt * c.block_m;
      const int rows = static_cast<int>(std::min<int64_t>(c.block_m, s.M - m0));
      const int mslabs = (rows + kMr - 1) / kMr;
      for (int64_t k0 = kbeg; k0 < kend; k0 += c.block_k) {
        const int64_t kc = std::min<int64_t>(c.block_k, kend - k0);  // ragged K: masked to K
        PackActivations(a, b, m0, rows, k0, kc, apanel);
        for (int i = 0; i < mslabs; ++i) {
          for (int j = 0; j < nslabs; ++j) {
            const float* ap = apanel + static_cast<int64_t>(i) * kc * kMr;
            const float* bp = wpanel + static_cast<int64_t>(j) * kNr * krange + (k0 - kbeg) * kNr;
            float* cp = ctile + static_cast<int64_t>(i) * kMr * ldc + j * kNr;
            if (avx) Micro6x16Avx2(kc, ap, bp, cp, ldc, k0 != kbeg);
            else Micro6x16Scalar(kc, ap, bp, cp, ldc, k0 != kbeg);
          }
        }
      }
      for (int r = 0; r < rows; ++r) {
        const float* cr = ctile + static_cast<int64_t>(r) * ldc;
        if (c.ksplit == 1) {
          uint16_t* yr = a.y + b * a.ys.b + (m0 + r) * a.ys.m + n0;
          for (int j = 0; j < ncols; ++j) yr[j] = mxfp4::FloatToBf16Bits(cr[j]);
        } else {
          float* pr = partial.data() + ((split * s.B + b) * s.M + m0 + r) * s.N + n0;
          std::memcpy(pr, cr, ncols * sizeof(float));
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
