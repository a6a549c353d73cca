// A16WFP4 batched GEMM on GPUs, one source for nvcc (sm_90a) and hipcc (CDNA).
//
//   y[b, m, n] = bf16( sum_k xa[b, m, k] * dequant(w)[b, n, k] )
//   x (B, M, K) bf16, w (B, N, K/2) + scales (B, N, K/32), y (B, M, N) bf16
//   with any strides (see kernels/include/mxval/kernel_api.h).
//
// Kernels (exported through the mxval kernel ABI by kernel_library.cu):
//   a16wfp4_tc    tensor-core kernel: NVIDIA mma.sync m16n8k16 bf16 (with
//                 cp.async multi-stage loads and ldmatrix), AMD MFMA
//                 16x16x16 bf16 on gfx90a/gfx94x (compile-checked only).
//                 Needs unit-stride K and 16-byte aligned rows of x and w.
//   a16wfp4_simt  portable fallback: scalar FMAs, any strides; its tile
//                 phases are unit-tested on the CPU (a16wfp4_tile.h).
//   a16wfp4_decode  small M (NVIDIA): one pass over the weights per row
//                 tile, dequantized straight into mma fragments in
//                 registers; see below.
//   a16wfp4_wgmma  M > 64 (NVIDIA sm_90a): warpgroup MMA against a weight
//                 panel dequantized once per CTA into swizzled shared memory,
//                 x through a cp.async or TMA-fed ring, output through TMA
//                 stores (TMA-fed variants); see below.
//   a16wfp4_wgmma_rs  M > 16 (NVIDIA sm_90a): y^T = w x^T, the weights
//                 dequantized once per CTA into wgmma A fragments in
//                 registers (64 or 32 rows per warpgroup), x the
//                 shared-memory operand through a TMA ring, the transposed
//                 tile stored by TMA; see below.
//   reduce        split-K: sums the FP32 partials in split order, rounds.
// Per-CTA flow (a16wfp4_tile.h): load x and packed w tiles, dequantize the w
// tile to bf16 in smem once (reused by every row of the CTA), re-quantize x
// in smem in mxfp4-even mode, multiply-accumulate in fp32, then stage the
// bf16 tile through smem for coalesced 16-byte stores.
//   a16wfp4_mfma_scale  AMD gfx950, mxfp4-even mode: the native MXFP4 MFMA
//                 (v_mfma_scale_f32_16x16x128_f8f6f4). UNTESTED ON HARDWARE
//                 and never compiled for gfx950 (no compiler here targets
//                 it); its lane logic is tested on the CPU. See below and
//                 kernels/gpu/mfma_scale_fp4.h.
#include "kernels/gpu/a16wfp4_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gpu/a16wfp4_tile.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/mfma_scale_fp4.h"
#include "kernels/gpu/tc_configs.h"
#if defined(MXVAL_NVIDIA)
#include <cuda.h>  // CUtensorMap (types only: the encoder is fetched from the driver at run time)
#include <cuda_bf16.h>

#include "kernels/gpu/wgmma_sm90.h"
#endif

namespace mxval {
namespace gpu {
namespace {

// ------------------------------------------------------------------------
// Vendor atoms.
#if defined(MXVAL_NVIDIA)
constexpr int kWarpSize = 32;

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte async copy global -> shared; src_bytes = 0 zero-fills (masking).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void Ldmatrix4(uint32_t r[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}
// D = A(16x16, row) * B(16x8, col) + D, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void MmaBf16_16x8x16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Warp tile WM x WN from smem xs (row-major, LDX) and wd ([n][k], LDW).
template <int WM, int WN, int BK, int LDX, int LDW>
struct WarpMma {
  static constexpr int MI = WM / 16, NI = WN / 8;
  float acc[MI][NI][4];
  __device__ void Zero() {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  }
  __device__ void Step(const uint16_t* xs, const uint16_t* wd, int wm0, int wn0, int lane, int ldw = LDW) {
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t a[MI][4];
#pragma unroll
      for (int i = 0; i < MI; ++i) Ldmatrix4(a[i], xs + (wm0 + i * 16 + (lane & 15)) * LDX + ks * 16 + (lane >> 4) * 8);
      uint32_t b[NI][2];
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {
        uint32_t r[4];
        Ldmatrix4(r, wd + (wn0 + j * 16 + (lane & 7) + ((lane >> 4) << 3)) * ldw + ks * 16 + ((lane >> 3) & 1) * 8);
        b[2 * j][0] = r[0];
        b[2 * j][1] = r[1];
        b[2 * j + 1][0] = r[2];
        b[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) MmaBf16_16x8x16(acc[i][j], a[i], b[j]);
    }
  }
  // Calls f(row, col, v0, v1) for each pair of adjacent columns it holds.
  template <typename F>
  __device__ void ForEachPair(int wm0, int wn0, int lane, F f) const {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        f(wm0 + i * 16 + g, wn0 + j * 8 + t * 2, acc[i][j][0], acc[i][j][1]);
        f(wm0 + i * 16 + g + 8, wn0 + j * 8 + t * 2, acc[i][j][2], acc[i][j][3]);
      }
  }
};
#elif defined(MXVAL_AMD)
constexpr int kWarpSize = 64;
typedef short bf16x4_t __attribute__((ext_vector_type(4)));
typedef float floatx4_t __attribute__((ext_vector_type(4)));

// MFMA 16x16x16 bf16 (gfx90a, gfx94x): lane l holds A[l%16][4*(l/16) + 0..3],
// B[4*(l/16) + 0..3][l%16]; D[4*(l/16) + i][l%16]. Compile-checked only.
template <int WM, int WN, int BK, int LDX, int LDW>
struct WarpMma {
  static constexpr int MI = WM / 16, NI = WN / 16;
  floatx4_t acc[MI][NI];
  __device__ void Zero() {
    for (int i = 0; i < MI; ++i)
      for (int j = 0; j < NI; ++j) acc[i][j] = floatx4_t{0, 0, 0, 0};
  }
  __device__ void Step(const uint16_t* xs, const uint16_t* wd, int wm0, int wn0, int lane, int ldw = LDW) {
    for (int ks = 0; ks < BK / 16; ++ks) {
      bf16x4_t a[MI], b[NI];
      for (int i = 0; i < MI; ++i)
        a[i] = *reinterpret_cast<const bf16x4_t*>(xs + (wm0 + i * 16 + (lane & 15)) * LDX + ks * 16 + (lane >> 4) * 4);
      for (int j = 0; j < NI; ++j)
        b[j] = *reinterpret_cast<const bf16x4_t*>(wd + (wn0 + j * 16 + (lane & 15)) * ldw + ks * 16 + (lane >> 4) * 4);
      for (int i = 0; i < MI; ++i)
        for (int j = 0; j < NI; ++j) acc[i][j] = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a[i], b[j], acc[i][j], 0, 0, 0);
    }
  }
  template <typename F>
  __device__ void ForEachPair(int wm0, int wn0, int lane, F f) const {
    // D holds single columns; report pairs as (v, next) only where adjacent
    // lanes are not available: callers accept a pair with a NaN-free second.
    for (int i = 0; i < MI; ++i)
      for (int j = 0; j < NI; ++j)
        for (int e = 0; e < 4; ++e) f(wm0 + i * 16 + (lane >> 4) * 4 + e, wn0 + j * 16 + (lane & 15), acc[i][j][e], 0.0f, 1);
  }
};
#endif

// ------------------------------------------------------------------------
// Tensor-core kernel.
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
struct TcConfig {
  static constexpr int kThreads = WARPS_M * WARPS_N * kWarpSize;
  static constexpr int kLdx = BK + 8, kLdw = BK + 8, kLdo = BN + 8;
  static constexpr int kWm = BM / WARPS_M, kWn = BN / WARPS_N;
  // Shared-memory layout sizes (kernels/gpu/tc_configs.h).
  static constexpr size_t kXRegion = TcXRegionBytes(BM, BN, BK, STAGES);
  static constexpr size_t kWpBytes = TcWpBytes(BN, BK, STAGES);
  static constexpr size_t kFixed = TcFixedSmemBytes(BM, BN, BK, STAGES);
  // Plus the CTA's scale slab, BN x kgroups bytes (known at launch).
  static size_t Smem(int kgroups) { return TcSmemBytes(BM, BN, BK, STAGES, kgroups); }
  static_assert(BM % (16 * WARPS_M) == 0, "warp tile rows must be a multiple of 16");
  static_assert(BN % (16 * WARPS_N) == 0, "warp tile columns must be a multiple of 16");
  static_assert(BK % 32 == 0, "BLOCK_K must be a multiple of the 32-element scale group");
  static_assert(STAGES >= 2, "at least double buffering");
};

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(WARPS_M* WARPS_N* kWarpSize)
    A16wfp4TcKernel(GemmParams p) {
  using C = TcConfig<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
  extern __shared__ uint4 smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_raw);
  uint16_t* xs_all = reinterpret_cast<uint16_t*>(smem);                     // (STAGES, BM, LDX)
  uint8_t* wp_all = smem + C::kXRegion;                                      // (STAGES, BN, BK/2)
  uint16_t* wd = reinterpret_cast<uint16_t*>(smem + C::kXRegion + C::kWpBytes);  // (BN, LDW)
  DequantLut* lut = reinterpret_cast<DequantLut*>(smem + C::kFixed - sizeof(DequantLut));
  uint8_t* slab = smem + C::kFixed;                                          // (BN, kgroups) scales
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int wm0 = (warp / WARPS_N) * C::kWm, wn0 = (warp % WARPS_N) * C::kWn;
  const TileCoord c = CtaCoord(p, blockIdx.x, blockIdx.y, blockIdx.z, BM, BN);
  const int nk = c.kt1 - c.kt0;

  // Issues the loads of k tile `kt` into stage `st` (masked, never past K).
  auto issue = [&](int st, int kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * BK;
#if defined(MXVAL_NVIDIA)
    uint16_t* xs = xs_all + st * BM * C::kLdx;
    for (int i = tid; i < BM * (BK / 8); i += C::kThreads) {
      const int r = i / (BK / 8), q = i % (BK / 8);
      const int64_t m = c.m0 + r, k = k0 + q * 8;
      const bool ok = m < p.M && k < p.K;
      CpAsync16(xs + r * C::kLdx + q * 8, ok ? p.x + c.b * p.x_sb + m * p.x_sm + k : p.x, ok ? 16 : 0);
    }
    uint8_t* wp = wp_all + st * BN * (BK / 2);
    for (int i = tid; i < BN * (BK / 32); i += C::kThreads) {
      const int r = i / (BK / 32), q = i % (BK / 32);
      const int64_t n = c.n0 + r, k = k0 + q * 32;
      const bool ok = n < p.N && k < p.K;
      CpAsync16(wp + r * (BK / 2) + q * 16, ok ? p.wp + c.b * p.wp_sb + n * p.wp_sn + k / 2 : p.wp, ok ? 16 : 0);
    }
#else
    LoadXTileGeneric<BM, BK, C::kLdx>(p, c, k0, xs_all + st * BM * C::kLdx, tid, C::kThreads);
#endif
  };

  WarpMma<C::kWm, C::kWn, BK, C::kLdx, C::kLdw> mma;
  mma.Zero();
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nk) issue(s, c.kt0 + s);
#if defined(MXVAL_NVIDIA)
    CpAsyncCommit();
#endif
  }
  BuildDequantLut(lut, tid, C::kThreads);
  // The CTA's scale bytes for its whole K range, loaded once while the
  // prologue's copies are in flight (groups >= K/32 are never read).
  const int64_t g0 = static_cast<int64_t>(c.kt0) * BK / 32;
  const int64_t kg_all = p.K / 32;
  for (int i = tid; i < BN * p.kgroups; i += C::kThreads) {
    const int r = i / p.kgroups;
    const int64_t n = c.n0 + r, g = g0 + i % p.kgroups;
    slab[i] = (n < p.N && g < kg_all && g < static_cast<int64_t>(c.kt1) * BK / 32) ? p.ws[c.b * p.ws_sb + n * p.ws_sn + g]
                                                                                    : uint8_t{127};
  }
  for (int it = 0; it < nk; ++it) {
    const int st = it % STAGES;
#if defined(MXVAL_NVIDIA)
    CpAsyncWait<STAGES - 2>();
#endif
    __syncthreads();
    // Refill the stage consumed in the previous iteration (every warp has
    // passed the barrier, so its mma and dequant reads are done): the copy
    // overlaps this iteration's dequant and mma.
    if (it + STAGES - 1 < nk) issue((it + STAGES - 1) % STAGES, c.kt0 + it + STAGES - 1);
#if defined(MXVAL_NVIDIA)
    CpAsyncCommit();
#endif
    const int64_t k0 = static_cast<int64_t>(c.kt0 + it) * BK;
    uint16_t* xs = xs_all + st * BM * C::kLdx;
    if (p.act_mxfp4) FakeQuantXTile<BM, BK, C::kLdx>(xs, tid, C::kThreads);
#if defined(MXVAL_NVIDIA)
    DequantWTile<BN, BK, C::kLdw>(p, c, k0, wp_all + st * BN * (BK / 2), wd, tid, C::kThreads, slab, p.kgroups, g0,
                                  lut);
#else
    DequantWTile<BN, BK, C::kLdw>(p, c, k0, nullptr, wd, tid, C::kThreads, slab, p.kgroups, g0, lut);
#endif
    __syncthreads();
    mma.Step(xs, wd, wm0, wn0, lane);
  }

  if (p.ksplit > 1) {  // FP32 partials straight from registers
    mma.ForEachPair(wm0, wn0, lane, [&](int r, int col, float v0, float v1, int single = 0) {
      StoreOutput(p, c, c.m0 + r, c.n0 + col, v0);
      if (!single) StoreOutput(p, c, c.m0 + r, c.n0 + col + 1, v1);
    });
    return;
  }
  // Stage the bf16 tile in smem, then write rows with 16-byte stores.
  __syncthreads();
  uint16_t* out = xs_all;  // (BM, LDO)
  mma.ForEachPair(wm0, wn0, lane, [&](int r, int col, float v0, float v1, int single = 0) {
    out[r * C::kLdo + col] = mxfp4::FloatToBf16Bits(v0);
    if (!single) out[r * C::kLdo + col + 1] = mxfp4::FloatToBf16Bits(v1);
  });
  __syncthreads();
  const bool vec_ok = (p.N % 8 == 0) && (p.y_sm % 8 == 0) && (p.y_sb % 8 == 0) &&
                      (reinterpret_cast<uintptr_t>(p.y) % 16 == 0);
  for (int i = tid; i < BM * (BN / 8); i += C::kThreads) {
    const int r = i / (BN / 8), q = i % (BN / 8);
    const int64_t m = c.m0 + r, n = c.n0 + q * 8;
    if (m >= p.M || n >= p.N) continue;
    uint16_t* dst = p.y + c.b * p.y_sb + m * p.y_sm + n;
    const uint16_t* src = out + r * C::kLdo + q * 8;
    if (vec_ok) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && n + e < p.N; ++e) dst[e] = src[e];
    }
  }
}


// ------------------------------------------------------------------------
// Panel kernel: a CTA owns (batch, N tile, K split, M group). It dequantizes
// its weight panel for the split's whole K range into shared memory once and
// reuses it for every M tile of its group (tiles by, by + G, by + 2G, ...),
// streaming only x tiles through the cp.async pipeline. At large M the
// dequantization cost, which dominates the per-tile kernel, vanishes.
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
struct PanelConfig {
  static constexpr int kThreads = WARPS_M * WARPS_N * kWarpSize;
  static constexpr int kLdx = BK + 8, kLdo = BN + 8;
  static constexpr int kWm = BM / WARPS_M, kWn = BN / WARPS_N;
  static constexpr size_t kXBytes = size_t{STAGES} * BM * kLdx * 2;
  static constexpr size_t kOutBytes = size_t{BM} * kLdo * 2;
  // Layout: [x stages | out staging | lut | panel (BN, kp + 8) | slab (BN, kp / 32)].
  // The packed panel is first staged in the x-stage region, (tiles, BN, BK/2).
  __host__ __device__ static size_t PackedBytes(int kp) { return size_t{BN} * kp / 2; }
  __host__ __device__ static size_t Smem(int kp) {
    const size_t xregion = kXBytes > PackedBytes(kp) ? kXBytes : PackedBytes(kp);
    return xregion + kOutBytes + sizeof(DequantLut) + size_t{BN} * (kp + 8) * 2 + (size_t{BN} * kp / 32 + 15) / 16 * 16;
  }
  static_assert(BM % (16 * WARPS_M) == 0 && BN % (16 * WARPS_N) == 0 && BK % 32 == 0 && STAGES >= 2, "tile shape");
};

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(WARPS_M* WARPS_N* kWarpSize, 1) A16wfp4PanelKernel(GemmParams p, int groups) {
  using C = PanelConfig<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
  extern __shared__ uint4 smem_raw[];
  const TileCoord c0 = CtaCoord(p, blockIdx.x, 0, blockIdx.z, BM, BN);
  const int nk = c0.kt1 - c0.kt0;
  const int kp = p.kgroups * 32;  // panel width: max K tiles per split * BK
  const int ldp = kp + 8;
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_raw);
  const size_t xregion = C::kXBytes > C::PackedBytes(kp) ? C::kXBytes : C::PackedBytes(kp);
  uint16_t* xs_all = reinterpret_cast<uint16_t*>(smem);
  uint16_t* out = reinterpret_cast<uint16_t*>(smem + xregion);
  DequantLut* lut = reinterpret_cast<DequantLut*>(smem + xregion + C::kOutBytes);
  uint16_t* panel = reinterpret_cast<uint16_t*>(smem + xregion + C::kOutBytes + sizeof(DequantLut));
  uint8_t* slab = reinterpret_cast<uint8_t*>(panel + size_t{BN} * ldp);
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int wm0 = (warp / WARPS_N) * C::kWm, wn0 = (warp % WARPS_N) * C::kWn;

  // 1. Stage the packed panel (tile-major), the scales and the table; dequantize once.
  uint8_t* packed = smem;
  for (int i = tid; i < nk * BN * (BK / 32); i += C::kThreads) {
    const int t = i / (BN * (BK / 32)), rem = i % (BN * (BK / 32));
    const int r = rem / (BK / 32), q = rem % (BK / 32);
    const int64_t n = c0.n0 + r, k = static_cast<int64_t>(c0.kt0 + t) * BK + q * 32;
    const bool ok = n < p.N && k < p.K;
#if defined(MXVAL_NVIDIA)
    CpAsync16(packed + (static_cast<size_t>(t) * BN + r) * (BK / 2) + q * 16, ok ? p.wp + c0.b * p.wp_sb + n * p.wp_sn + k / 2 : p.wp,
              ok ? 16 : 0);
#else
    for (int e = 0; e < 16; ++e) packed[(static_cast<size_t>(t) * BN + r) * (BK / 2) + q * 16 + e] = ok ? p.wp[c0.b * p.wp_sb + n * p.wp_sn + k / 2 + e] : 0;
#endif
  }
#if defined(MXVAL_NVIDIA)
  CpAsyncCommit();
#endif
  const int64_t g0 = static_cast<int64_t>(c0.kt0) * BK / 32;
  for (int i = tid; i < BN * p.kgroups; i += C::kThreads) {
    const int r = i / p.kgroups;
    const int64_t n = c0.n0 + r, g = g0 + i % p.kgroups;
    slab[i] = (n < p.N && g < p.K / 32) ? p.ws[c0.b * p.ws_sb + n * p.ws_sn + g] : uint8_t{127};
  }
  BuildDequantLut(lut, tid, C::kThreads);
#if defined(MXVAL_NVIDIA)
  CpAsyncWait<0>();
#endif
  __syncthreads();
  for (int t = 0; t < nk; ++t) {
    DequantWTile<BN, BK>(p, c0, static_cast<int64_t>(c0.kt0 + t) * BK, packed + static_cast<size_t>(t) * BN * (BK / 2),
                         panel + t * BK, ldp, tid, C::kThreads, slab, p.kgroups, g0, lut);
  }
  __syncthreads();  // the panel is ready; the x stages (which held the packed panel) are free

  // 2. Stream x tiles for every (M tile of this group, K tile).
  const int64_t mtiles = (p.M + BM - 1) / BM;
  const int my_tiles = static_cast<int>(mtiles > blockIdx.y ? (mtiles - 1 - blockIdx.y) / groups + 1 : 0);
  const int steps = my_tiles * nk;
  auto issue = [&](int st, int step) {
    const int64_t m0 = (blockIdx.y + static_cast<int64_t>(step / nk) * groups) * BM;
    const int64_t k0 = static_cast<int64_t>(c0.kt0 + step % nk) * BK;
#if defined(MXVAL_NVIDIA)
    uint16_t* xs = xs_all + st * BM * C::kLdx;
    for (int i = tid; i < BM * (BK / 8); i += C::kThreads) {
      const int r = i / (BK / 8), q = i % (BK / 8);
      const int64_t m = m0 + r, k = k0 + q * 8;
      const bool ok = m < p.M && k < p.K;
      CpAsync16(xs + r * C::kLdx + q * 8, ok ? p.x + c0.b * p.x_sb + m * p.x_sm + k : p.x, ok ? 16 : 0);
    }
#else
    TileCoord cm = c0;
    cm.m0 = m0;
    LoadXTileGeneric<BM, BK, C::kLdx>(p, cm, k0, xs_all + st * BM * C::kLdx, tid, C::kThreads);
#endif
  };
  WarpMma<C::kWm, C::kWn, BK, C::kLdx, C::kLdx> mma;
  mma.Zero();
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) issue(s, s);
#if defined(MXVAL_NVIDIA)
    CpAsyncCommit();
#endif
  }
  const bool vec_ok = (p.N % 8 == 0) && (p.y_sm % 8 == 0) && (p.y_sb % 8 == 0) &&
                      (reinterpret_cast<uintptr_t>(p.y) % 16 == 0);
  for (int step = 0; step < steps; ++step) {
    const int st = step % STAGES, j = step % nk;
#if defined(MXVAL_NVIDIA)
    CpAsyncWait<STAGES - 2>();
#endif
    __syncthreads();
    if (step + STAGES - 1 < steps) issue((step + STAGES - 1) % STAGES, step + STAGES - 1);
#if defined(MXVAL_NVIDIA)
    CpAsyncCommit();
#endif
    uint16_t* xs = xs_all + st * BM * C::kLdx;
    if (p.act_mxfp4) {
      FakeQuantXTile<BM, BK, C::kLdx>(xs, tid, C::kThreads);
      __syncthreads();
    }
    mma.Step(xs, panel + j * BK, wm0, wn0, lane, ldp);
    if (j != nk - 1) continue;
    // Epilogue for this M tile.
    TileCoord cm = c0;
    cm.m0 = (blockIdx.y + static_cast<int64_t>(step / nk) * groups) * BM;
    if (p.ksplit > 1) {
      mma.ForEachPair(wm0, wn0, lane, [&](int r, int col, float v0, float v1, int single = 0) {
        StoreOutput(p, cm, cm.m0 + r, cm.n0 + col, v0);
        if (!single) StoreOutput(p, cm, cm.m0 + r, cm.n0 + col + 1, v1);
      });
    } else {
      mma.ForEachPair(wm0, wn0, lane, [&](int r, int col, float v0, float v1, int single = 0) {
        out[r * C::kLdo + col] = mxfp4::FloatToBf16Bits(v0);
        if (!single) out[r * C::kLdo + col + 1] = mxfp4::FloatToBf16Bits(v1);
      });
      __syncthreads();
      for (int i = tid; i < BM * (BN / 8); i += C::kThreads) {
        const int r = i / (BN / 8), q = i % (BN / 8);
        const int64_t m = cm.m0 + r, n = cm.n0 + q * 8;
        if (m >= p.M || n >= p.N) continue;
        uint16_t* dst = p.y + cm.b * p.y_sb + m * p.y_sm + n;
        const uint16_t* src = out + r * C::kLdo + q * 8;
        if (vec_ok) {
          *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        } else {
          for (int e = 0; e < 8 && n + e < p.N; ++e) dst[e] = src[e];
        }
      }
      // `out` is rewritten only after the next tile's K loop, past a barrier.
    }
    mma.Zero();
  }
}

// ------------------------------------------------------------------------
// SIMT fallback: any strides, any arch.
__global__ void __launch_bounds__(SimtDefault::kThreads) A16wfp4SimtKernel(GemmParams p) {
  __shared__ __align__(16) uint16_t xs[kSimtBM * kSimtLDX];
  __shared__ __align__(16) uint16_t wd[kSimtBN * kSimtLDW];
  const TileCoord c = CtaCoord(p, blockIdx.x, blockIdx.y, blockIdx.z, kSimtBM, kSimtBN);
  float acc[kSimtTM * kSimtTN] = {};
  for (int kt = c.kt0; kt < c.kt1; ++kt) {
    SimtLoadPhase(p, c, kt, xs, wd, threadIdx.x);
    __syncthreads();
    if (p.act_mxfp4) {
      FakeQuantXTile<kSimtBM, kSimtBK, kSimtLDX>(xs, threadIdx.x, SimtDefault::kThreads);
      __syncthreads();
    }
    SimtDefault::Mma(xs, wd, acc, threadIdx.x);
    __syncthreads();
  }
  SimtDefault::Store(p, c, acc, threadIdx.x);
}

// Split-K reduce: y = bf16(sum over splits in order).
__global__ void ReduceSplitsKernel(GemmParams p) {
  const int64_t total = p.B * p.M * p.N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i % p.N, m = (i / p.N) % p.M, b = i / (p.N * p.M);
    float acc = 0.0f;
    for (int s = 0; s < p.ksplit; ++s) acc += p.partial[s * total + i];
    p.y[b * p.y_sb + m * p.y_sm + n] = mxfp4::FloatToBf16Bits(acc);
  }
}

// ------------------------------------------------------------------------
// Host side.
void SetErr(char* err, size_t len, const char* msg) {
  if (err != nullptr && len > 0) snprintf(err, len, "%s", msg);
}

#if defined(MXVAL_NVIDIA)
// Programmatic dependent launch for a16wfp4_decode, the TMA-fed
// a16wfp4_wgmma variants and a16wfp4_wgmma_rs: when the caller allows it
// (args->launch_flags & MXVAL_LAUNCH_PDL, ABI version 2), or for every call
// while MXVAL_CUDA_PDL=1 is set (the bench scripts' switch, read per call so
// one process can time both launches; a graph keeps what was captured).
bool PdlRequested(const mxval_gemm_args* a) {
  if (a->launch_flags & MXVAL_LAUNCH_PDL) return true;
  const char* v = getenv("MXVAL_CUDA_PDL");
  return v != nullptr && v[0] == '1';
}

// Launches `kernel` with programmatic stream serialization (programmatic
// dependent launch): it may start while the kernel before it on the stream
// is still running, and must wait (griddepcontrol.wait) before it reads
// that kernel's outputs or writes anything that kernel may read.
// LaunchEx: optionally with PDL and / or in clusters of `cluster_x` CTAs
// along x (1: no cluster attribute).
template <typename... Params, typename... Args>
cudaError_t LaunchEx(void (*kernel)(Params...), dim3 grid, int threads, size_t smem, void* stream, bool pdl,
                     int cluster_x, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = static_cast<unsigned>(cluster_x);
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...);
}
template <typename... Params, typename... Args>
cudaError_t LaunchWithPdl(void (*kernel)(Params...), dim3 grid, int threads, size_t smem, void* stream,
                          Args&&... args) {
  return LaunchEx(kernel, grid, threads, smem, stream, true, 1, static_cast<Args&&>(args)...);
}
#endif

GemmParams MakeParams(const mxval_gemm_args& a, int bk, int ksplit) {
  GemmParams p;
  p.B = a.B;
  p.M = a.M;
  p.N = a.N;
  p.K = a.K;
  p.act_mxfp4 = a.activations == MXVAL_ACT_MXFP4_EVEN;
  p.x = static_cast<const uint16_t*>(a.x);
  p.x_sb = a.x_stride_b;
  p.x_sm = a.x_stride_m;
  p.x_sk = a.x_stride_k;
  p.wp = a.w_packed;
  p.wp_sb = a.w_packed_stride_b;
  p.wp_sn = a.w_packed_stride_n;
  p.ws = a.w_scales;
  p.ws_sb = a.w_scales_stride_b;
  p.ws_sn = a.w_scales_stride_n;
  p.y = static_cast<uint16_t*>(a.y);
  p.y_sb = a.y_stride_b;
  p.y_sm = a.y_stride_m;
  p.partial = static_cast<float*>(a.workspace);
  p.ksplit = ksplit;
  p.ktiles = static_cast<int>((a.K + bk - 1) / bk);
  p.kgroups = static_cast<int>((p.ktiles + ksplit - 1) / ksplit * (bk / 32));
  return p;
}

int32_t CheckCommon(const mxval_gemm_args* a, char* err, size_t len) {
  if (a == nullptr) return SetErr(err, len, "args is null"), 1;
  if (a->B < 1 || a->M < 1 || a->N < 1) return SetErr(err, len, "B, M and N must be >= 1"), 1;
  if (a->K < 32 || a->K % 32 != 0) return SetErr(err, len, "K must be a positive multiple of 32"), 1;
  if (a->B > 65535) return SetErr(err, len, "B must be <= 65535"), 1;
  if (a->x == nullptr || a->w_packed == nullptr || a->w_scales == nullptr || a->y == nullptr) {
    return SetErr(err, len, "x, w_packed, w_scales and y must be non-null"), 1;
  }
  if (a->activations != MXVAL_ACT_BF16 && a->activations != MXVAL_ACT_MXFP4_EVEN) {
    return SetErr(err, len, "activations must be bf16 (0) or mxfp4-even (1)"), 1;
  }
  return 0;
}

int32_t CheckSplit(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  const int64_t ktiles = (a->K + c->block_k - 1) / c->block_k;
  if (c->ksplit < 1 || c->ksplit > ktiles) {
    char msg[160];
    snprintf(msg, sizeof(msg), "NUM_KSPLIT = %d must be in [1, ceil(K / BLOCK_SIZE_K) = %lld]", c->ksplit,
             static_cast<long long>(ktiles));
    return SetErr(err, len, msg), 1;
  }
  if (c->ksplit > 1 && a->workspace_bytes < static_cast<size_t>(c->ksplit) * a->B * a->M * a->N * sizeof(float)) {
    return SetErr(err, len, "workspace too small for NUM_KSPLIT partials (see workspace_size)"), 1;
  }
  const int64_t mtiles = (a->M + c->block_m - 1) / c->block_m;
  if (mtiles > 65535) return SetErr(err, len, "M / BLOCK_SIZE_M exceeds the grid limit (65535)"), 1;
  if (a->B * c->ksplit > 65535) return SetErr(err, len, "B * NUM_KSPLIT exceeds the grid limit (65535)"), 1;
  return 0;
}

int32_t LaunchReduce(const mxval_gemm_args* a, const GemmParams& p, char* err, size_t len) {
  if (p.ksplit == 1) return 0;
  const int64_t total = p.B * p.M * p.N;
  const int blocks = static_cast<int>(total / 256 + 1 < 4096 ? total / 256 + 1 : 4096);
  ReduceSplitsKernel<<<blocks, 256, 0, static_cast<gpuStream_t>(a->stream)>>>(p);
  const gpuError_t e = gpuGetLastError();
  if (e != gpuSuccess) return SetErr(err, len, gpuGetErrorString(e)), 1;
  return 0;
}

// The compiled tensor-core instantiations: MXVAL_TC_CONFIGS in kernels/gpu/tc_configs.h.

struct TcEntry {
  mxval_tile_config config;
  size_t (*smem)(int kgroups);
  void (*kernel)(GemmParams);
};

#define MXVAL_TC_ENTRY(BM, BN, BK, WMW, WNW, ST)                                         \
  {{BM, BN, BK, 1, ST, WMW * WNW}, TcConfig<BM, BN, BK, WMW, WNW, ST>::Smem, \
   A16wfp4TcKernel<BM, BN, BK, WMW, WNW, ST>},
const TcEntry kTcEntries[] = {MXVAL_TC_CONFIGS(MXVAL_TC_ENTRY)};
constexpr int kNumTc = sizeof(kTcEntries) / sizeof(kTcEntries[0]);

// Whether a compiled config is c: (BM, BN, BK, num_stages, num_warps) match
// (NUM_KSPLIT is checked by each kernel).
bool SameConfig(const mxval_tile_config& a, const mxval_tile_config* c) {
  return a.block_m == c->block_m && a.block_n == c->block_n && a.block_k == c->block_k &&
         a.num_stages == c->num_stages && a.num_warps == c->num_warps;
}
// The compiled entry matching c, or null.
template <typename Entry, size_t N>
const Entry* FindEntry(const Entry (&entries)[N], const mxval_tile_config* c) {
  for (const Entry& e : entries) {
    if (SameConfig(e.config, c)) return &e;
  }
  return nullptr;
}
// The entries' configs, in entry order, as the ABI's list (built once).
template <typename Entry, size_t N>
const mxval_tile_config* EntryConfigs(const Entry (&entries)[N], int32_t* n) {
  struct List {
    mxval_tile_config c[N];
  };
  static const List list = [&entries] {
    List l{};
    for (size_t i = 0; i < N; ++i) l.c[i] = entries[i].config;
    return l;
  }();
  *n = static_cast<int32_t>(N);
  return list.c;
}
const TcEntry* FindTc(const mxval_tile_config* c) { return FindEntry(kTcEntries, c); }

// Panel-kernel instantiations: (BM, BN, BK, WARPS_M, WARPS_N, STAGES).
#define MXVAL_PANEL_CONFIGS(X) \
  X(128, 128, 64, 2, 4, 3)     \
  X(128, 64, 64, 2, 2, 3)      \
  X(64, 128, 64, 2, 4, 3)      \
  X(128, 64, 128, 2, 2, 2)

struct PanelEntry {
  mxval_tile_config config;
  size_t (*smem)(int kp);
  void (*kernel)(GemmParams, int);
};
#define MXVAL_PANEL_ENTRY(BM, BN, BK, WMW, WNW, ST)                                         \
  {{BM, BN, BK, 1, ST, WMW * WNW}, PanelConfig<BM, BN, BK, WMW, WNW, ST>::Smem, \
   A16wfp4PanelKernel<BM, BN, BK, WMW, WNW, ST>},
const PanelEntry kPanelEntries[] = {MXVAL_PANEL_CONFIGS(MXVAL_PANEL_ENTRY)};
constexpr int kNumPanel = sizeof(kPanelEntries) / sizeof(kPanelEntries[0]);

const PanelEntry* FindPanel(const mxval_tile_config* c) { return FindEntry(kPanelEntries, c); }

// The device's opt-in shared memory per block, or 0 if it cannot be queried.
int OptinSmem() {
  int dev = 0, optin = 0;
  if (gpuGetDevice(&dev) != gpuSuccess) return 0;
  if (gpuDeviceGetAttribute(&optin, gpuDevAttrMaxSharedMemoryPerBlockOptin, dev) != gpuSuccess) return 0;
  return optin;
}

// Raises `kernel`'s dynamic shared-memory limit to `smem` when above the
// default 48 KiB, once per kernel and size per host thread (`done` caches it).
template <typename Kernel>
int32_t RaiseSmem(Kernel kernel, size_t smem, size_t* done, char* err, size_t len) {
  if (smem <= 48 * 1024 || smem <= *done) return 0;
  if (smem > static_cast<size_t>(OptinSmem())) {
    return SetErr(err, len, "config needs more shared memory than the device allows per block"), 1;
  }
  const gpuError_t se = gpuFuncSetAttribute(kernel, gpuFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (se != gpuSuccess) return SetErr(err, len, gpuGetErrorString(se)), 1;
  *done = smem;
  return 0;
}

}  // namespace

const mxval_tile_config* PanelConfigs(int32_t* n) { return EntryConfigs(kPanelEntries, n); }

int32_t PanelCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CheckCommon(a, err, len)) return r;
  if (c == nullptr) return SetErr(err, len, "config is null"), 1;
  const PanelEntry* e = FindPanel(c);
  if (e == nullptr) {
    return SetErr(err, len, "this config is not compiled into a16wfp4_tc_panel; see the kernel's config list"), 1;
  }
  if (int32_t r = CheckSplit(a, c, err, len)) return r;
#if defined(MXVAL_NVIDIA)
  if (a->x_stride_k != 1 || reinterpret_cast<uintptr_t>(a->x) % 16 || a->x_stride_m % 8 || a->x_stride_b % 8) {
    return SetErr(err, len, "a16wfp4_tc_panel needs unit-stride, 16-byte aligned x rows"), 1;
  }
  if (reinterpret_cast<uintptr_t>(a->w_packed) % 16 || a->w_packed_stride_n % 16 || a->w_packed_stride_b % 16) {
    return SetErr(err, len, "a16wfp4_tc_panel needs 16-byte aligned w_packed rows"), 1;
  }
#endif
  const GemmParams p = MakeParams(*a, c->block_k, c->ksplit);
  if (e->smem(p.kgroups * 32) > static_cast<size_t>(OptinSmem())) {
    return SetErr(err, len, "K per split is too large for a16wfp4_tc_panel's shared-memory weight panel (raise NUM_KSPLIT)"), 1;
  }
  return 0;
}

int32_t PanelRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = PanelCanImplement(a, c, err, len)) return r;
  const PanelEntry* e = FindPanel(c);
  const GemmParams p = MakeParams(*a, c->block_k, c->ksplit);
  const size_t smem = e->smem(p.kgroups * 32);
  static thread_local size_t raised[kNumPanel] = {};
  if (int32_t r = RaiseSmem(e->kernel, smem, &raised[e - kPanelEntries], err, len)) return r;
  // M groups: enough CTAs for about one wave (one CTA per SM fits), each
  // reusing its dequantized panel across as many M tiles as possible.
  int dev = 0, sms = 0;
  if (gpuGetDevice(&dev) != gpuSuccess || gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, dev) != gpuSuccess ||
      sms <= 0) {
    return SetErr(err, len, "cannot query the device's multiprocessor count"), 1;
  }
  const int64_t ntiles = (a->N + c->block_n - 1) / c->block_n;
  const int64_t mtiles = (a->M + c->block_m - 1) / c->block_m;
  const int64_t outer = ntiles * a->B * c->ksplit;
  int64_t groups = (sms + outer - 1) / outer;
  if (groups > mtiles) groups = mtiles;
  if (groups < 1) groups = 1;
  if (groups > 65535) groups = 65535;
  const dim3 grid(static_cast<unsigned>(ntiles), static_cast<unsigned>(groups), static_cast<unsigned>(a->B * c->ksplit));
  e->kernel<<<grid, c->num_warps * kWarpSize, smem, static_cast<gpuStream_t>(a->stream)>>>(p, static_cast<int>(groups));
  const gpuError_t le = gpuGetLastError();
  if (le != gpuSuccess) return SetErr(err, len, gpuGetErrorString(le)), 1;
  return LaunchReduce(a, p, err, len);
}

// Exposed configs (ksplit = 1 listed; any NUM_KSPLIT up to the K tiles runs).
const mxval_tile_config* TcConfigs(int32_t* n) { return EntryConfigs(kTcEntries, n); }

int32_t TcCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CheckCommon(a, err, len)) return r;
  if (c == nullptr) return SetErr(err, len, "config is null"), 1;
  if (FindTc(c) == nullptr) {
    return SetErr(err, len,
                  "this (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, num_stages, num_warps) is not compiled into "
                  "a16wfp4_tc; see the kernel's config list"),
           1;
  }
  if (int32_t r = CheckSplit(a, c, err, len)) return r;
#if defined(MXVAL_NVIDIA)
  if (a->x_stride_k != 1) return SetErr(err, len, "a16wfp4_tc needs x_stride_k == 1 (use a16wfp4_simt)"), 1;
  if (reinterpret_cast<uintptr_t>(a->x) % 16 || a->x_stride_m % 8 || a->x_stride_b % 8) {
    return SetErr(err, len, "a16wfp4_tc needs 16-byte aligned x rows (x, x_stride_m, x_stride_b multiples of 8 elements)"), 1;
  }
  if (reinterpret_cast<uintptr_t>(a->w_packed) % 16 || a->w_packed_stride_n % 16 || a->w_packed_stride_b % 16) {
    return SetErr(err, len, "a16wfp4_tc needs 16-byte aligned w_packed rows"), 1;
  }
#endif
  return 0;
}

size_t WorkspaceSize(const mxval_gemm_args* a, const mxval_tile_config* c) {
  if (a == nullptr || c == nullptr || c->ksplit <= 1) return 0;
  return static_cast<size_t>(c->ksplit) * a->B * a->M * a->N * sizeof(float);
}

int32_t TcRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = TcCanImplement(a, c, err, len)) return r;
  const TcEntry* e = FindTc(c);
  const GemmParams p = MakeParams(*a, c->block_k, c->ksplit);
  const size_t smem = e->smem(p.kgroups);
  static thread_local size_t raised[kNumTc] = {};
  if (int32_t r = RaiseSmem(e->kernel, smem, &raised[e - kTcEntries], err, len)) return r;
  const dim3 grid(static_cast<unsigned>((a->N + c->block_n - 1) / c->block_n),
                  static_cast<unsigned>((a->M + c->block_m - 1) / c->block_m),
                  static_cast<unsigned>(a->B * c->ksplit));
  e->kernel<<<grid, c->num_warps * kWarpSize, smem, static_cast<gpuStream_t>(a->stream)>>>(p);
  const gpuError_t le = gpuGetLastError();
  if (le != gpuSuccess) return SetErr(err, len, gpuGetErrorString(le)), 1;
  return LaunchReduce(a, p, err, len);
}

const mxval_tile_config* SimtConfigs(int32_t* n) {
  static const mxval_tile_config kConfig = {kSimtBM, kSimtBN, kSimtBK, 1, 1, SimtDefault::kThreads / 32};
  *n = 1;
  return &kConfig;
}

int32_t SimtCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CheckCommon(a, err, len)) return r;
  if (c == nullptr) return SetErr(err, len, "config is null"), 1;
  if (c->block_m != kSimtBM || c->block_n != kSimtBN || c->block_k != kSimtBK) {
    return SetErr(err, len, "a16wfp4_simt runs BLOCK_SIZE_M=32, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32 only"), 1;
  }
  return CheckSplit(a, c, err, len);
}

int32_t SimtRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = SimtCanImplement(a, c, err, len)) return r;
  const GemmParams p = MakeParams(*a, kSimtBK, c->ksplit);
  const dim3 grid(static_cast<unsigned>((a->N + kSimtBN - 1) / kSimtBN),
                  static_cast<unsigned>((a->M + kSimtBM - 1) / kSimtBM), static_cast<unsigned>(a->B * c->ksplit));
  A16wfp4SimtKernel<<<grid, SimtDefault::kThreads, 0, static_cast<gpuStream_t>(a->stream)>>>(p);
  const gpuError_t le = gpuGetLastError();
  if (le != gpuSuccess) return SetErr(err, len, gpuGetErrorString(le)), 1;
  return LaunchReduce(a, p, err, len);
}


// ------------------------------------------------------------------------
// Decode kernel ("a16wfp4_decode", small M, NVIDIA): one CTA per (batch,
// 8 * WARPS columns, BLOCK_SIZE_M-row tile) computes all its rows at once,
// so each weight byte is read and dequantized once per row tile (exactly
// once when M <= BLOCK_SIZE_M), straight into mma.sync B fragments in
// registers (no weight tile in shared memory, no K-loop barriers). More
// row tiles re-read the weights but stage less x per CTA: at M = 64, two
// 32-row tiles can beat one 64-row tile (the table's buckets choose).
//
// K is permuted consistently for both operands: in m16n8k16 a lane with
// t = lane % 4 holds the k slots {2t, 2t+1, 2t+8, 2t+9} of each 16-wide
// step. Lane slice t owns the contiguous actual k range [t*K/4, (t+1)*K/4);
// at step c its four slots are the actual k = t*K/4 + 4c + {0, 1, 2, 3}.
// Every k is used exactly once with matching x and w, so the sum is the
// same; in exchange a lane's weights are K/8 contiguous bytes (one row
// segment) and its x operands are 8-byte shared-memory loads.
namespace {
#if defined(MXVAL_NVIDIA)
// (v0, v1) -> bf16x2 bits, v0 in the low half (round to nearest even).
__device__ __forceinline__ uint32_t PackBf16x2(float v0, float v1) {
  return static_cast<uint32_t>(mxfp4::FloatToBf16Bits(v0)) | (static_cast<uint32_t>(mxfp4::FloatToBf16Bits(v1)) << 16);
}

// WN column warps (8 columns each) x KW k-split warps per CTA; the KW
// partial sums are added in a fixed order through shared memory. x rows are
// padded by 8 elements in shared memory. (A swizzled layout without the
// padded rows' 2-4-way bank conflicts on the x loads was measured slower on
// the H200: BENCHMARKS.md "Decode: 16 and 32 k-split warps".)
template <int WN, int KW, int MT, int K>
__global__ void __launch_bounds__(WN * KW * 32) A16wfp4DecodeKernel(GemmParams p) {
  constexpr int kThreads = WN * KW * 32;
  constexpr int KS = K / KW;    // actual k per k-split warp
  constexpr int KL = KS / 4;    // actual k per lane slice
  constexpr int NG = KL / 32 + 2;  // scale groups a lane slice can touch
  constexpr int kLdx = K + 8;  // x row pitch in smem (elements)
  constexpr int kRows = MT * 16;
  static_assert(KL % 16 == 0, "K / KW must be a multiple of 64");
  extern __shared__ uint4 smem_raw[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem_raw);  // (kRows, kLdx)
  float* part = reinterpret_cast<float*>(xs + kRows * kLdx);  // (KW - 1, WN, MT, 4, 32)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wn = warp % WN, kw = warp / WN;
  const int g = lane >> 2, t = lane & 3;
  const int64_t b = blockIdx.z;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kRows;  // this CTA's first row
  const int64_t ncol0 = static_cast<int64_t>(blockIdx.x) * (WN * 8) + wn * 8;
  const int64_t n = ncol0 + g;  // this lane's weight row
  const bool n_ok = n < p.N;
  const int kbase = kw * KS + t * KL;  // this lane slice's first actual k

  // 1. This lane's KL/2 packed weight bytes and its scale bytes, issued
  //    before the x staging so all global loads are in flight together.
  //    Rows past N are zeros; scale groups past K/32 are never read.
  uint32_t wq[KL / 8];
  const uint8_t* wrow = p.wp + b * p.wp_sb + n * p.wp_sn + kbase / 2;
#pragma unroll
  for (int i = 0; i < KL / 16; ++i) {
    uint2 v = make_uint2(0u, 0u);
    if (n_ok) v = *reinterpret_cast<const uint2*>(wrow + 8 * i);
    wq[2 * i] = v.x;
    wq[2 * i + 1] = v.y;
  }
  const int g_lo = kbase >> 5, g_hi = (kbase + KL - 1) >> 5;
  uint32_t sbyte[NG];
  const uint8_t* srow = p.ws + b * p.ws_sb + n * p.ws_sn;
#pragma unroll
  for (int j = 0; j < NG; ++j) sbyte[j] = (n_ok && g_lo + j <= g_hi) ? srow[g_lo + j] : 127u;

  // Launched with programmatic dependent launch (MXVAL_CUDA_PDL=1), this CTA
  // may start while the kernel before it on the stream is still running:
  // the weights and scales above are read before waiting (they are not the
  // previous kernel's output), x and y only after it has finished.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif

  // 2. x rows [m0, m0 + kRows) of this batch into smem (16-byte loads; rows
  //    >= M are zeros, never read from global memory). Measured against
  //    cp.async (every copy in flight, one wait) and against one bulk copy per
  //    row (cp.async.bulk, completing on an mbarrier): plain loads were as
  //    fast or faster (V-up M=64 7.4 vs 8.8 us; 7.1 vs 8.3 us), see
  //    BENCHMARKS.md. Without k-split warps (KW = 1) up to 16 loads per
  //    thread are issued before the first store (the compiler's unrolling
  //    kept 4 in flight): K-up 3-10% faster at M = 16...64. With k-split
  //    warps the same change was 3-10% slower (V-up M = 64 7.8 vs 7.1 us), so
  //    they keep the plain loop.
  const int rows = static_cast<int>(p.M - m0 < kRows ? p.M - m0 : kRows);
  const uint16_t* xb = p.x + b * p.x_sb + m0 * p.x_sm;
  constexpr int kChunks = kRows * (K / 8);  // 16-byte pieces of the x tile
  // Piece i of the tile: loaded from global memory (zeros past the tile or
  // past M), stored into its padded row.
  auto load = [&](int i) -> uint4 {
    const int r = i / (K / 8), j = i % (K / 8);
    if (i >= kChunks || r >= rows) return make_uint4(0u, 0u, 0u, 0u);
    return *reinterpret_cast<const uint4*>(xb + r * p.x_sm + j * 8);
  };
  auto store = [&](int i, const uint4& v) {
    if (i >= kChunks) return;
    const int r = i / (K / 8), j = i % (K / 8);
    *reinterpret_cast<uint4*>(xs + r * kLdx + 8 * j) = v;
  };
  if constexpr (KW == 1) {
    constexpr int kIters = (kChunks + kThreads - 1) / kThreads;
    constexpr int kBatch = kIters < 16 ? kIters : 16;
#pragma unroll 1
    for (int j0 = 0; j0 < kIters; j0 += kBatch) {
      uint4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) v[j] = load((j0 + j) * kThreads + tid);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) store((j0 + j) * kThreads + tid, v[j]);
    }
  } else {
    for (int i = tid; i < kChunks; i += kThreads) store(i, load(i));
  }
  __syncthreads();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // the next kernel may start its prologue
#endif
  if (p.act_mxfp4) {  // activations re-quantized per 32-k group, even rule
    for (int gi = tid; gi < rows * (K / 32); gi += kThreads) {
      uint16_t* grp = xs + (gi / (K / 32)) * kLdx + (gi % (K / 32)) * 32;
      float v[32];
      uint8_t codes[32];
      for (int i = 0; i < 32; ++i) v[i] = mxfp4::Bf16BitsToFloat(grp[i]);
      const float q = mxfp4::DecodeE8M0(mxfp4::QuantizeBlock(v, 1, 32, mxfp4::ScaleRule::kEven, codes));
      for (int i = 0; i < 32; ++i) grp[i] = mxfp4::FloatToBf16Bits(mxfp4::DecodeE2M1(codes[i]) * q);
    }
    __syncthreads();
  }

  // 3. KL/4 mma steps per 16-row tile; the weights are dequantized once,
  //    by bit placement and a bf16x2 multiply per word (E2M1x8ViaMul,
  //    a16wfp4_tile.h); a group whose scale byte that does not cover
  //    (2^2 and above, NaN) takes the exact float path.
  uint32_t mult[NG];
  bool covered[NG];
#pragma unroll
  for (int j = 0; j < NG; ++j) {
    covered[j] = E2M1MulCover(sbyte[j]);
    mult[j] = E2M1MulScale(sbyte[j]);
  }
  float acc[MT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  U32x4 deq = {};
#pragma unroll
  for (int c = 0; c < KL / 4; ++c) {
    const int k0 = kbase + 4 * c;
    if (c % 2 == 0) {
      // 8 codes (this step's 4 and the next one's), all in one scale group
      // (kbase is a multiple of 16): a constant when lane slices start on a
      // group boundary (KL % 32 == 0), else selected without indexing.
      const int gi = KL % 32 == 0 ? 4 * c / 32 : (k0 >> 5) - g_lo;
      uint32_t mu = mult[0];
      bool cov = covered[0];
      uint32_t sb = sbyte[0];
#pragma unroll
      for (int j = 1; j < NG; ++j) {
        if (gi == j) mu = mult[j], cov = covered[j], sb = sbyte[j];
      }
      deq = cov ? E2M1x8ViaMul(wq[c / 2], mu) : DequantBytes8(wq[c / 2], static_cast<uint8_t>(sb), nullptr);
    }
    const uint32_t bf[2] = {deq.v[2 * (c % 2)], deq.v[2 * (c % 2) + 1]};
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const uint16_t* xr = xs + (i * 16 + g) * kLdx + k0;
      const uint2 lo = *reinterpret_cast<const uint2*>(xr);
      const uint2 hi = *reinterpret_cast<const uint2*>(xr + 8 * kLdx);
      const uint32_t a[4] = {lo.x, hi.x, lo.y, hi.y};
      MmaBf16_16x8x16(acc[i], a, bf);
    }
  }

  // 4. K-split warps hand their partial sums to warp kw = 0 of the column.
  if (KW > 1) {
    if (kw > 0) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) part[((((kw - 1) * WN + wn) * MT + i) * 4 + e) * 32 + lane] = acc[i][e];
    }
    __syncthreads();
    if (kw > 0) return;
#pragma unroll
    for (int j = 1; j < KW; ++j)
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] += part[((((j - 1) * WN + wn) * MT + i) * 4 + e) * 32 + lane];
  }

  // 5. Each lane holds rows (g, g + 8) x columns (2t, 2t + 1) of every tile.
  const int64_t col = ncol0 + 2 * t;
  const bool pair_ok = col + 1 < p.N && (p.y_sm % 2 == 0) && (p.y_sb % 2 == 0) &&
                       (reinterpret_cast<uintptr_t>(p.y) % 4 == 0);
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = m0 + i * 16 + g + 8 * h;
      if (m >= p.M || col >= p.N) continue;
      uint16_t* dst = p.y + b * p.y_sb + m * p.y_sm + col;
      if (pair_ok) {
        *reinterpret_cast<uint32_t*>(dst) = PackBf16x2(acc[i][2 * h], acc[i][2 * h + 1]);
      } else {
        dst[0] = mxfp4::FloatToBf16Bits(acc[i][2 * h]);
        if (col + 1 < p.N) dst[1] = mxfp4::FloatToBf16Bits(acc[i][2 * h + 1]);
      }
    }
  }
}
#endif  // MXVAL_NVIDIA

// Compiled decode variants. A config (BLOCK_SIZE_M, BLOCK_SIZE_N, num_warps)
// means 16-row tiles MT = BM / 16, column warps WN = BN / 8 and k-split warps
// KW = num_warps / WN; each is compiled for K in {128, 192, 256, 512} where
// K / KW is a multiple of 64, with k-split warps for K in {256, 512} only
// (8 k-split warps: K = 512 only). The kernel has no pipeline stages:
// num_stages is 1.
struct DecodeEntry {
  int block_m, block_n, warps, k;
  void (*kernel)(GemmParams);
};
#if defined(MXVAL_NVIDIA)
#define MXVAL_DECODE_E(WN, KW, MT, K) {MT * 16, WN * 8, WN * KW, K, A16wfp4DecodeKernel<WN, KW, MT, K>},
#define MXVAL_DECODE_ALLK(WN, KW, MT) \
  MXVAL_DECODE_E(WN, KW, MT, 128) MXVAL_DECODE_E(WN, KW, MT, 192) MXVAL_DECODE_E(WN, KW, MT, 256) MXVAL_DECODE_E(WN, KW, MT, 512)
#define MXVAL_DECODE_BIGK(WN, KW, MT) MXVAL_DECODE_E(WN, KW, MT, 256) MXVAL_DECODE_E(WN, KW, MT, 512)
#define MXVAL_DECODE_K512(WN, KW, MT) MXVAL_DECODE_E(WN, KW, MT, 512)
#define MXVAL_DECODE_MT(X, WN, KW) X(WN, KW, 1) X(WN, KW, 2) X(WN, KW, 4)
const DecodeEntry kDecodeEntries[] = {
    MXVAL_DECODE_MT(MXVAL_DECODE_ALLK, 4, 1) MXVAL_DECODE_MT(MXVAL_DECODE_ALLK, 8, 1)
    MXVAL_DECODE_MT(MXVAL_DECODE_BIGK, 2, 2) MXVAL_DECODE_MT(MXVAL_DECODE_BIGK, 4, 2)
    MXVAL_DECODE_MT(MXVAL_DECODE_BIGK, 2, 4) MXVAL_DECODE_MT(MXVAL_DECODE_BIGK, 4, 4)
    MXVAL_DECODE_MT(MXVAL_DECODE_K512, 2, 8) MXVAL_DECODE_MT(MXVAL_DECODE_K512, 4, 8)};
#undef MXVAL_DECODE_E
#undef MXVAL_DECODE_ALLK
#undef MXVAL_DECODE_BIGK
#undef MXVAL_DECODE_K512
#undef MXVAL_DECODE_MT
#endif
// (BM, BN, BK (nominal: the kernel reads all of K), KSPLIT, stages, warps).
const mxval_tile_config kDecodeConfigs[] = {
    {16, 32, 64, 1, 1, 4}, {16, 64, 64, 1, 1, 8}, {32, 32, 64, 1, 1, 4}, {32, 64, 64, 1, 1, 8},
    {64, 32, 64, 1, 1, 4}, {64, 64, 64, 1, 1, 8}, {16, 16, 64, 1, 1, 4}, {32, 16, 64, 1, 1, 4},
    {64, 16, 64, 1, 1, 4}, {16, 32, 64, 1, 1, 8}, {32, 32, 64, 1, 1, 8}, {64, 32, 64, 1, 1, 8},
    {16, 16, 64, 1, 1, 8}, {32, 16, 64, 1, 1, 8}, {64, 16, 64, 1, 1, 8},
    // 4 k-split warps per 8 columns (16 warps on 32 columns): half the x
    // staging per column of BN = 16 / 8 warps; the V-up M = 16...64 buckets.
    {16, 32, 64, 1, 1, 16}, {32, 32, 64, 1, 1, 16}, {64, 32, 64, 1, 1, 16},
    // 8 k-split warps (K = 512 only): more warps per SM, half the MMA chain.
    {16, 16, 64, 1, 1, 16}, {32, 16, 64, 1, 1, 16}, {64, 16, 64, 1, 1, 16},
    {16, 32, 64, 1, 1, 32}, {32, 32, 64, 1, 1, 32}, {64, 32, 64, 1, 1, 32},
};
constexpr int kNumDecode = sizeof(kDecodeConfigs) / sizeof(kDecodeConfigs[0]);

// x rows plus the k-split partial sums.
size_t DecodeSmem(const mxval_tile_config* c, int64_t K) {
  const int wn = c->block_n / 8, kw = c->num_warps / wn;
  return static_cast<size_t>(c->block_m) * (K + 8) * 2 +
         static_cast<size_t>(kw - 1) * wn * (c->block_m / 16) * 4 * 32 * sizeof(float);
}

}  // namespace

const mxval_tile_config* DecodeConfigs(int32_t* n) {
  *n = kNumDecode;
  return kDecodeConfigs;
}

int32_t DecodeCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CheckCommon(a, err, len)) return r;
  if (c == nullptr) return SetErr(err, len, "config is null"), 1;
#if !defined(MXVAL_NVIDIA)
  return SetErr(err, len, "a16wfp4_decode is NVIDIA-only (mma.sync fragments); use a16wfp4_tc here"), 1;
#else
  bool known = false;
  for (const mxval_tile_config& k : kDecodeConfigs) {
    known |= k.block_m == c->block_m && k.block_n == c->block_n && k.block_k == c->block_k &&
             k.num_warps == c->num_warps && k.num_stages == c->num_stages;
  }
  if (!known) return SetErr(err, len, "this config is not compiled into a16wfp4_decode; see the kernel's config list"), 1;
  if (c->ksplit != 1) return SetErr(err, len, "a16wfp4_decode runs NUM_KSPLIT=1 only (it reads all of K per CTA)"), 1;
  if ((a->M + c->block_m - 1) / c->block_m > 65535) {
    return SetErr(err, len, "M / BLOCK_SIZE_M exceeds the grid limit (65535)"), 1;
  }
  bool compiled = false;
  for (const DecodeEntry& d : kDecodeEntries)
    compiled |= d.block_m == c->block_m && d.block_n == c->block_n && d.warps == c->num_warps && d.k == a->K;
  if (!compiled) {
    return SetErr(err, len,
                  "a16wfp4_decode is compiled for K in {128, 192, 256, 512}; with k-split warps (num_warps > "
                  "BLOCK_SIZE_N / 8) for K in {256, 512} only, with 8 k-split warps for K = 512 only"), 1;
  }
  if (a->x_stride_k != 1 || reinterpret_cast<uintptr_t>(a->x) % 16 || a->x_stride_m % 8 || a->x_stride_b % 8) {
    return SetErr(err, len, "a16wfp4_decode needs unit-stride, 16-byte aligned x rows"), 1;
  }
  if (reinterpret_cast<uintptr_t>(a->w_packed) % 8 || a->w_packed_stride_n % 8 || a->w_packed_stride_b % 8) {
    return SetErr(err, len, "a16wfp4_decode needs 8-byte aligned w_packed rows"), 1;
  }
  if (a->B > 65535 || (a->N + c->block_n - 1) / c->block_n > 2147483647LL) {
    return SetErr(err, len, "grid too large"), 1;
  }
  if (DecodeSmem(c, a->K) > static_cast<size_t>(OptinSmem())) {
    return SetErr(err, len, "BLOCK_SIZE_M x K of x does not fit in shared memory"), 1;
  }
  return 0;
#endif
}

int32_t DecodeRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = DecodeCanImplement(a, c, err, len)) return r;
#if defined(MXVAL_NVIDIA)
  const DecodeEntry* e = nullptr;
  for (const DecodeEntry& d : kDecodeEntries)
    if (d.block_m == c->block_m && d.block_n == c->block_n && d.warps == c->num_warps && d.k == a->K) e = &d;
  if (e == nullptr) return SetErr(err, len, "no compiled a16wfp4_decode variant for this config and K"), 1;
  const GemmParams p = MakeParams(*a, 64, 1);
  const size_t smem = DecodeSmem(c, a->K);
  static thread_local size_t raised[sizeof(kDecodeEntries) / sizeof(kDecodeEntries[0])] = {};
  if (int32_t r = RaiseSmem(e->kernel, smem, &raised[e - kDecodeEntries], err, len)) return r;
  const dim3 grid(static_cast<unsigned>((a->N + c->block_n - 1) / c->block_n),
                  static_cast<unsigned>((a->M + c->block_m - 1) / c->block_m), static_cast<unsigned>(a->B));
  // Opt-in programmatic dependent launch (MXVAL_LAUNCH_PDL; BENCHMARKS.md
  // has both timings): the contract is that w_packed and w_scales are not
  // written by the kernel launched just before this one on the stream.
  if (PdlRequested(a)) {
    const cudaError_t le = LaunchWithPdl(e->kernel, grid, c->num_warps * 32, smem, a->stream, p);
    if (le != cudaSuccess) return SetErr(err, len, cudaGetErrorString(le)), 1;
    return 0;
  }
  e->kernel<<<grid, c->num_warps * 32, smem, static_cast<gpuStream_t>(a->stream)>>>(p);
  const gpuError_t le = gpuGetLastError();
  if (le != gpuSuccess) return SetErr(err, len, gpuGetErrorString(le)), 1;
  return 0;
#else
  return 1;
#endif
}


// ------------------------------------------------------------------------
// Hopper kernel ("a16wfp4_wgmma", sm_90a, large M): warpgroup MMA with both
// operands in shared memory in the 128-byte-swizzled K-major layout.
//
// A CTA owns (batch, BN columns) and a strided set of BM-row tiles (tiles
// g, g + G, g + 2G, ... for CTA row g of G). It dequantizes its whole weight
// panel (BN x K, bf16) into shared memory once, then streams x through a
// cp.async ring of (BM x 64) k chunks while each warpgroup (64 rows) issues
// wgmma.m64nBNk16 against the resident panel, one wgmma group left in
// flight across chunks. Rows >= M are zero-filled copies (never read past),
// columns >= N dequantize to zero and are not stored. K must be a multiple
// of 64 (the k chunk); NUM_KSPLIT = 1.
namespace {
#if defined(MXVAL_NVIDIA)
template <int WGS, int BN, int STAGES>
struct WgConfig {
  static constexpr int kBM = 64 * WGS, kThreads = 128 * WGS;
  static constexpr int kXStage = kBM * 128;     // bytes: BM rows x 64 bf16
  static constexpr int kPanelChunk = BN * 128;  // bytes: BN rows x 64 bf16
  // 1 KiB of slack aligns the swizzled tiles.
  static size_t Smem(int64_t K) { return 1024 + size_t{STAGES} * kXStage + static_cast<size_t>(K / 64) * kPanelChunk; }
  static_assert(STAGES >= 3, "one wgmma group stays in flight: prefetch distance STAGES - 2");
};

// Byte offset of 16-byte chunk c of row r in a 128-byte-swizzled tile.
__device__ __forceinline__ int Sw128(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }
// (lo, hi) -> bf16x2 bits, lo in the low half, round to nearest even.
__device__ __forceinline__ uint32_t CvtBf16x2(float lo, float hi) {
  const __nv_bfloat162 pr = __floats2bfloat162_rn(lo, hi);  // one cvt.rn.bf16x2.f32
  return *reinterpret_cast<const uint32_t*>(&pr);
}

// Keeps the compiler from moving accumulator registers while a wgmma that
// writes them may be in flight.
template <int R>
__device__ __forceinline__ void FenceRegs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// 4x4 transpose of 32-bit words across the 4 lanes of a quad: lane t's
// a[c] becomes lane c's a[t]. Two butterfly rounds (lane distance 2, then
// 1), each exchanging the two words whose index differs from the lane's in
// that bit.
__device__ __forceinline__ void QuadTranspose4(uint32_t (&a)[4], int t) {
  const bool hi2 = t & 2, hi1 = t & 1;
  uint32_t x0 = hi2 ? a[0] : a[2], x1 = hi2 ? a[1] : a[3];
  x0 = __shfl_xor_sync(0xFFFFFFFFu, x0, 2);
  x1 = __shfl_xor_sync(0xFFFFFFFFu, x1, 2);
  if (hi2) {
    a[0] = x0, a[1] = x1;
  } else {
    a[2] = x0, a[3] = x1;
  }
  uint32_t y0 = hi1 ? a[0] : a[1], y1 = hi1 ? a[2] : a[3];
  y0 = __shfl_xor_sync(0xFFFFFFFFu, y0, 1);
  y1 = __shfl_xor_sync(0xFFFFFFFFu, y1, 1);
  if (hi1) {
    a[0] = y0, a[2] = y1;
  } else {
    a[1] = y0, a[3] = y1;
  }
}

// mxfp4-even: re-quantizes row r's 32-element group g (of a 64-wide chunk)
// of a swizzled x stage in place.
__device__ __forceinline__ void RequantSwizzledGroup(uint8_t* stage, int r, int g) {
  float v[32];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint4 u = *reinterpret_cast<const uint4*>(stage + Sw128(r, 4 * g + q));
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[8 * q + 2 * e] = mxfp4::BitsToFloat(w[e] << 16);
      v[8 * q + 2 * e + 1] = mxfp4::BitsToFloat(w[e] & 0xFFFF0000u);
    }
  }
  EvenRequant32(v);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint4 u;
    u.x = PackBf16x2(v[8 * q + 0], v[8 * q + 1]);
    u.y = PackBf16x2(v[8 * q + 2], v[8 * q + 3]);
    u.z = PackBf16x2(v[8 * q + 4], v[8 * q + 5]);
    u.w = PackBf16x2(v[8 * q + 6], v[8 * q + 7]);
    *reinterpret_cast<uint4*>(stage + Sw128(r, 4 * g + q)) = u;
  }
}

// MXVAL_WGMMA_TRACE (a profiling build only, never the shipped library):
// the TMA-fed kernel records per CTA, from thread 0, SM cycles (clock64) at
// its phases: 0 entry, 1 barriers initialized, 2 weight panel built, 3 first
// x chunk landed, 4 last chunk of the first tile landed, 5 first tile's MMAs
// retired, 6 first tile's TMA store issued, 9 exit; 7 = (tiles << 32) | SM id,
// 8 / 10 = global timer (ns) at entry / exit; inside the panel build 14 its
// entry, 11 its first loads issued, 12 its first weights back, 13 the last
// thread's dequantization done (atomicMax over the CTA's threads). Read back through
// mxval_wgmma_trace_copy (bench/wgmma_trace.py prints the timeline).
// a16wfp4_wgmma_rs records the same slots where they mean the same (0, 1,
// 3-10); its prologue: 14 the weight rows' cp.async issued, 11 the scale
// loads issued, 12 the rows landed (warpgroup barrier passed), 2 thread
// 0's A fragments built, 13 the last consumer thread's (atomicMax); with
// split-K, 15 rank 0's wait for the partial tiles returned (first tile),
// and 6 on the other ranks their partial tile sent (first tile); 16-18 the
// global timer as the CTA starts tiles my_tiles / 4, / 2 and 3 / 4 (how far
// apart the batches' CTAs progress); 19 thread 0's scale bytes all arrived
// (after 12: the rows have landed).
#if defined(MXVAL_WGMMA_TRACE)
constexpr int kTraceCtas = 4096, kTraceSlots = 20;
__device__ unsigned long long g_wt_trace[kTraceCtas][kTraceSlots];
__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// The CTA's trace row (the grid's linear block index).
__device__ __forceinline__ unsigned TraceCta() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }
#define MXVAL_WT_STAMP(slot, value, cond)                                          \
  do {                                                                             \
    if ((cond) && TraceCta() < kTraceCtas) g_wt_trace[TraceCta()][slot] = (value); \
  } while (0)
#define MXVAL_WT_MARK(slot, cond) MXVAL_WT_STAMP(slot, static_cast<unsigned long long>(clock64()), cond)
// The latest clock64 over the threads that pass here.
#define MXVAL_WT_MAX(slot)                                                                        \
  do {                                                                                            \
    const unsigned long long now_ = clock64();                                                    \
    if (TraceCta() < kTraceCtas) atomicMax(&g_wt_trace[TraceCta()][slot], now_);                  \
  } while (0)
// Entry (slots 8, 0, 7; slot 13 reset for MXVAL_WT_MAX) and exit (9, 10),
// the same in every traced kernel.
#define MXVAL_WT_ENTER(tid, tiles)                                                         \
  do {                                                                                     \
    MXVAL_WT_STAMP(8, GlobalTimerNs(), (tid) == 0);                                        \
    MXVAL_WT_STAMP(13, 0ull, (tid) == 0);                                                  \
    MXVAL_WT_MARK(0, (tid) == 0);                                                          \
    unsigned smid_;                                                                        \
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid_));                                     \
    MXVAL_WT_STAMP(7, (static_cast<unsigned long long>(tiles) << 32) | smid_, (tid) == 0); \
  } while (0)
#define MXVAL_WT_EXIT(tid)                           \
  do {                                               \
    MXVAL_WT_MARK(9, (tid) == 0);                    \
    MXVAL_WT_STAMP(10, GlobalTimerNs(), (tid) == 0); \
  } while (0)
#else
#define MXVAL_WT_ENTER(tid, tiles) \
  do {                             \
  } while (0)
#define MXVAL_WT_EXIT(tid) \
  do {                     \
  } while (0)
#define MXVAL_WT_MARK(slot, cond) \
  do {                            \
  } while (0)
#define MXVAL_WT_STAMP(slot, value, cond) \
  do {                                    \
  } while (0)
#define MXVAL_WT_MAX(slot) \
  do {                     \
  } while (0)
#endif

// The CTA's weight panel: w[b, n0:n0+BN, 0:K] dequantized to bf16 into
// `panel` (K/64 chunks of BN 128-byte-swizzled rows) through per-scale
// prmt tables in registers (a16wfp4_tile.h), no shared-memory table. Ends
// with a barrier of `nthreads` threads (the whole CTA) after an
// async-proxy fence.
template <int BN, typename AfterLoads>
__device__ __forceinline__ void BuildPanel(const GemmParams& p, uint8_t* panel, int64_t b, int64_t n0, int tid,
                                           int nthreads, AfterLoads after_loads) {
  // One item = one 32-wide scale group of one column: 16 packed bytes and
  // one scale byte. kBatch items per thread are loaded before any is used,
  // so the panel costs about one memory latency per batch, not per item.
  // after_loads(0) runs once, right after the first batch's loads are
  // issued, and after_loads(1) once that batch's data has arrived and been
  // stored (the TMA kernel fills its x ring at those points, behind the
  // weights).
  // (A rolled dequantization loop, a conflict-free item order and an
  // out-of-line exact path were measured no faster: BENCHMARKS.md, "Where a
  // wgmma CTA's time goes".)
  // Item i's (column, group) = (i / kg, i % kg) is walked incrementally
  // (two divisions per thread, not two per item: the panel build is
  // instruction-bound with only 9 warps per SM).
  MXVAL_WT_MARK(14, tid == 0);
  constexpr int kBatch = 8;
  const int kg = static_cast<int>(p.K / 32), items = BN * kg;
  const int dr = nthreads / kg, dg = nthreads % kg;
  int rb = tid / kg, gb = tid % kg;  // item `base`
  auto advance = [&](int& r, int& g) {  // to the item nthreads further on
    r += dr;
    g += dg;
    if (g >= kg) {
      g -= kg;
      ++r;
    }
  };
  bool first = true;
  for (int base = tid; base < items || first; base += nthreads * kBatch) {
    uint4 w[kBatch];
    uint8_t sc[kBatch];
    int r = rb, g = gb;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * nthreads;
      const int64_t n = n0 + r;
      w[u] = make_uint4(0, 0, 0, 0);
      sc[u] = 127;  // past N: code 0 with scale 2^0
      if (i < items && n < p.N) {
        w[u] = *reinterpret_cast<const uint4*>(p.wp + b * p.wp_sb + n * p.wp_sn + g * 16);
        sc[u] = p.ws[b * p.ws_sb + n * p.ws_sn + g];  // g < K/32
      }
      advance(r, g);
    }
    r = rb;
    g = gb;
    if (first) {
      MXVAL_WT_MARK(11, tid == 0);
      after_loads(0);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * nthreads;
      if (i >= items) break;
      uint8_t* dst = panel + (g / 2) * (BN * 128);
      const uint32_t words[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
      if (E2M1TablesCover(sc[u])) {
        const E2M1Tables t = MakeE2M1Tables(sc[u]);
#pragma unroll
        for (int q = 0; q < 4; ++q) *reinterpret_cast<U32x4*>(dst + Sw128(r, (g % 2) * 4 + q)) = E2M1x8ViaTables(words[q], t);
      } else {  // subnormal, overflowing or NaN products: the exact float path
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          *reinterpret_cast<U32x4*>(dst + Sw128(r, (g % 2) * 4 + q)) = DequantBytes8(words[q], sc[u], nullptr);
        }
      }
      MXVAL_WT_MARK(12, tid == 0 && u == 0 && base == tid);  // after the first item's stores
      advance(r, g);
    }
    if (first) {
      after_loads(1);
      first = false;
    }
    rb = r;
    gb = g;
  }
  MXVAL_WT_MAX(13);
  FenceProxyAsync();
  __syncthreads();
}

// Stores one warpgroup's 64 x BN accumulator tile (rows m0.., columns n0..)
// as bf16. A quad (4 lanes, one row) holds 4 chunks of 8 columns as bf16
// pairs; a 4x4 transpose over the quad gives each lane 8 consecutive
// columns, stored as 16 bytes, so every row segment is written in whole
// 32-byte sectors (4-byte stores half-filled sectors and capped the kernel
// near 1 TB/s of output). N % 8 == 0 and 16-byte aligned y rows
// (can_implement).
template <int BN>
__device__ __forceinline__ void StoreTile(const GemmParams& p, float (&acc)[BN / 2], int64_t b, int64_t m0, int64_t n0,
                                          int warp, int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t m = m0 + warp * 16 + lane / 4 + 8 * h;
    uint16_t* row = p.y + b * p.y_sb + (m < p.M ? m : 0) * p.y_sm;
#pragma unroll
    for (int j = 0; j < BN / 8; j += 4) {
      uint32_t a[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        a[c] = CvtBf16x2(acc[4 * (j + c) + 2 * h], acc[4 * (j + c) + 2 * h + 1]);
      }
      QuadTranspose4(a, t);
      const int64_t n = n0 + 8 * (j + t);  // N % 8 == 0: a chunk is all in or all out
      if (m < p.M && n < p.N) *reinterpret_cast<uint4*>(row + n) = make_uint4(a[0], a[1], a[2], a[3]);
    }
  }
}

// MX: mxfp4-even activations (a separate instantiation, so the bf16 path
// does not carry the re-quantization's registers).
template <int WGS, int BN, int STAGES, bool MX>
__global__ void __launch_bounds__(WGS * 128) A16wfp4WgmmaKernel(GemmParams p, int groups) {
  using C = WgConfig<WGS, BN, STAGES>;
  constexpr int BM = C::kBM, kThreads = C::kThreads, D = STAGES - 2;
  extern __shared__ uint4 wg_smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(wg_smem_raw);
  smem += ((SmemAddr(smem) + 1023u) & ~1023u) - SmemAddr(smem);
  uint8_t* xs = smem;                               // STAGES x (BM x 128 B)
  uint8_t* panel = smem + STAGES * C::kXStage;      // K/64 x (BN x 128 B)
  const int tid = threadIdx.x;
  const int64_t b = blockIdx.z, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int nk = static_cast<int>(p.K / 64);

  // 1. Start the x ring (stages 0 .. D-1), then dequantize the weight panel
  //    while those copies fly.
  const int64_t mtiles = (p.M + BM - 1) / BM;
  const int my_tiles = static_cast<int>(mtiles > blockIdx.y ? (mtiles - 1 - blockIdx.y) / groups + 1 : 0);
  const int steps = my_tiles * nk;
  const uint16_t* xb = p.x + b * p.x_sb;
  auto issue = [&](int step) {
    if (step < steps) {
      const int64_t m0 = (blockIdx.y + static_cast<int64_t>(step / nk) * groups) * BM;
      const int64_t k0 = static_cast<int64_t>(step % nk) * 64;
      uint8_t* st = xs + (step % STAGES) * C::kXStage;
#pragma unroll
      for (int j = 0; j < BM * 8 / kThreads; ++j) {
        const int i = tid + j * kThreads, r = i / 8, c = i % 8;
        const int64_t m = m0 + r;
        const bool ok = m < p.M;
        CpAsync16(st + Sw128(r, c), ok ? xb + m * p.x_sm + k0 + c * 8 : p.x, ok ? 16 : 0);
      }
    }
    CpAsyncCommit();  // empty groups keep the wait counts uniform
  };
  for (int s = 0; s < D; ++s) issue(s);

  // The panel (ends with a barrier): visible to the tensor cores.
  BuildPanel<BN>(p, panel, b, n0, tid, kThreads, [](int) {});

  // 2. Stream x chunks: step s is (tile s / nk, k chunk s % nk).
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const uint32_t xs_addr = SmemAddr(xs), panel_addr = SmemAddr(panel);
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
  for (int step = 0; step < steps; ++step) {
    const int st = step % STAGES, kc = step % nk;
    CpAsyncWait<D - 1>();  // this thread's copies of `step` have landed
    if (MX) {
      __syncthreads();
      RequantSwizzledGroup(xs + st * C::kXStage, tid / 2, tid % 2);  // BM x 2 groups = one per thread
    }
    FenceProxyAsync();
    // Every copy of `step` is visible, and both warpgroups have retired the
    // wgmma group of step - 2, whose stage the next issue overwrites.
    __syncthreads();
    issue(step + D);
    const uint32_t a_base = xs_addr + st * C::kXStage + wg * 64 * 128;
    const uint32_t b_base = panel_addr + kc * C::kPanelChunk;
    FenceRegs(acc);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      Wgmma<BN>::Mma(acc, SmemDescSw128(a_base + kk * 32), SmemDescSw128(b_base + kk * 32), kc > 0 || kk > 0);
    }
    WgmmaCommit();
    if (kc != nk - 1) {
      WgmmaWait<1>();
      continue;
    }
    WgmmaWait<0>();
    FenceRegs(acc);
    StoreTile<BN>(p, acc, b, (blockIdx.y + static_cast<int64_t>(step / nk) * groups) * BM + wg * 64, n0, warp, lane);
  }
  WgmmaWait<0>();
  CpAsyncWait<0>();
}


// ---- Warp-specialized variant (num_warps = 9): the x ring is filled by TMA.
// Warp 8 is the producer: one lane issues cp.async.bulk.tensor copies of
// (BM=128 x 64) x chunks, 128-byte swizzled by the copy engine, each
// completing on the stage's `full` mbarrier; warps 0-7 (two warpgroups)
// consume, and release a stage (its `empty` mbarrier, one arrival per
// warp) once the wgmma group reading it has retired. The consumers never
// wait for a CTA-wide barrier in the loop and spend no issue slots on
// copies, and the producer keeps the ring full through their epilogues.
// Their epilogue stages each tile in shared memory and hands it to the copy
// engine (TMA stores), so a warpgroup's next MMAs overlap its output
// draining: about 1.5x at M = 16384 (GLM-5 K-up) against 16-byte st.global
// (BENCHMARKS.md, "TMA-store epilogue").
__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void MbarExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SmemAddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SmemAddr(bar)) : "memory");
}
// Waits until the phase with this parity has completed. kCluster: with
// cluster-scope acquire, for phases completed by other CTAs' arrivals or
// stores (split-K).
template <bool kCluster = false>
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = SmemAddr(bar);
  uint32_t done = 0;
  while (!done) {
    if constexpr (kCluster) {
      asm volatile(
          "{\n.reg .pred P;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P, [%1], %2;\nselp.u32 %0, 1, 0, "
          "P;\n}\n"
          : "=r"(done)
          : "r"(addr), "r"(parity)
          : "memory");
    } else {
      asm volatile(
          "{\n.reg .pred P;\nmbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2;\nselp.u32 %0, 1, 0, P;\n}\n"
          : "=r"(done)
          : "r"(addr), "r"(parity)
          : "memory");
    }
  }
}
// No L2 cache policy: evict-first y stores and evict-last x loads measured
// -1...+3% at M >= 4096, evict-first x loads 3-19% slower (BENCHMARKS.md,
// "k-split warpgroups and TMA L2 hints").
__device__ __forceinline__ void TmaLoad3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          SmemAddr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(SmemAddr(bar))
      : "memory");
}

// Pulls both tensor maps (kernel parameters) into the TMA unit's cache
// ahead of the first copy; one thread per CTA (the entry bit 2 of both
// Hopper kernels).
__device__ __forceinline__ void PrefetchTensorMaps(const CUtensorMap& xmap, const CUtensorMap& ymap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&xmap)) : "memory");
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&ymap)) : "memory");
}

// BM = 128: both consumer warpgroups work on one 128-row tile (64 rows
// each) and store their halves together. BM = 64 ("ping-pong"): each
// stage holds a 64-row tile, and consumer warpgroup w takes the CTA's
// tiles w, w + 2, ..., so one warpgroup's epilogue overlaps the other's
// MMAs.
__device__ __forceinline__ void NamedBarrier(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// TMA stores: one consumer warpgroup's 64 x BN bf16 tile is staged as BN/64
// boxes of 64 rows x 128 bytes (128-byte swizzled, as the y tensor map's
// boxes are), written with stmatrix and sent by one cp.async.bulk.tensor
// store per box; `bufs` (1 or 2) such staging areas per warpgroup.
template <int BM, int BN, int STAGES>
struct WtConfig {
  static constexpr int kThreads = 288, kXStage = BM * 128, kPanelChunk = BN * 128;
  static constexpr int kOutWg = 64 * BN * 2, kOutBox = 64 * 128;
  static size_t Smem(int64_t K, int bufs) {
    return 1024 + size_t{STAGES} * kXStage + static_cast<size_t>(K / 64) * kPanelChunk + size_t{2} * bufs * kOutWg +
           2 * STAGES * sizeof(uint64_t);
  }
  static_assert((BM == 64 || BM == 128) && STAGES >= 2, "ring");
  static_assert(BN % 64 == 0, "TMA stores go in 64-column boxes");
};

__device__ __forceinline__ void TmaStore3d(const CUtensorMap* map, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(SmemAddr(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void BulkCommit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's bulk store groups still read
// shared memory.
template <int N>
__device__ __forceinline__ void BulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void BulkWaitAll() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Thread block clusters (split-K through distributed shared memory).
// ClusterMap: the shared::cluster address of CTA `rank`'s copy of a local
// shared-memory address. Only arrivals may target another CTA's mbarrier;
// waits are local (MbarWait<true>: cluster-scope acquire, so that the remote
// stores the arrivals released are visible).
__device__ __forceinline__ uint32_t ClusterRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t ClusterMap(uint32_t local, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(local), "r"(rank));
  return r;
}
__device__ __forceinline__ void MbarArriveRemote(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}
// 16 bytes into another CTA's shared memory; the store's completion counts
// 16 bytes against that CTA's mbarrier (its transaction count), so the
// receiver waits for the data itself, with no separate arrival.
__device__ __forceinline__ void StAsyncF32x4(uint32_t addr, float a, float b, float c, float d, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(addr),
               "f"(a), "f"(b), "f"(c), "f"(d), "r"(bar)
               : "memory");
}
// Every thread of every CTA of the cluster (none may have exited).
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void Stmatrix4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Writes one warp's 16 rows of a warpgroup accumulator tile (64 x BN) as
// bf16 into `out` (BN/64 swizzled boxes of 64 x 128 bytes). The wgmma
// fp32 fragment holds, per 8 columns j, rows lane/4 (acc[4j], acc[4j+1])
// and lane/4 + 8 (acc[4j+2], acc[4j+3]): exactly the 8 x 8 matrices of
// stmatrix, four per instruction (two row halves x two column chunks).
// Lane l addresses row l % 8 of matrix l / 8; the 8 rows of a matrix sit in
// 8 different 16-byte bank groups (swizzle), so the stores do not conflict.
template <int BN>
__device__ __forceinline__ void StageTileSw128(uint32_t out, const float (&acc)[BN / 2], int warp, int lane) {
  const int row = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
#pragma unroll
  for (int j = 0; j < BN / 8; j += 2) {
    const int chunk = j + lane / 16;  // 8-column chunk of this lane's matrix
    const uint32_t addr = out + (chunk / 8) * (64 * 128) + Sw128(row, chunk % 8);
    Stmatrix4(addr, CvtBf16x2(acc[4 * j], acc[4 * j + 1]), CvtBf16x2(acc[4 * j + 2], acc[4 * j + 3]),
              CvtBf16x2(acc[4 * j + 4], acc[4 * j + 5]), CvtBf16x2(acc[4 * j + 6], acc[4 * j + 7]));
  }
}

// TS: the epilogue stages each warpgroup's tile in shared memory and
// stores it with TMA (`ymap`, `bufs` staging areas per warpgroup), so the
// warpgroup goes on to its next tile's MMAs while the copy engine drains
// the output; otherwise StoreTile's 16-byte st.global from registers.
template <int BM, int BN, int STAGES, bool MX, bool TS>
__global__ void __launch_bounds__(288, 1)
    A16wfp4WgmmaTmaKernel(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap ymap,
                          GemmParams p, int groups, int bufs, int flags) {
  using C = WtConfig<BM, BN, STAGES>;
  constexpr bool kPingPong = BM == 64;
  extern __shared__ uint4 wt_smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(wt_smem_raw);
  smem += ((SmemAddr(smem) + 1023u) & ~1023u) - SmemAddr(smem);
  uint8_t* xs = smem;
  uint8_t* panel = smem + STAGES * C::kXStage;
  uint8_t* ystage = panel + (p.K / 64) * C::kPanelChunk;  // 1024-aligned: BN x 128 per chunk
  uint64_t* full = reinterpret_cast<uint64_t*>(ystage + (TS ? 2 * bufs * C::kOutWg : 0));
  uint64_t* empty = full + STAGES;
  const int tid = threadIdx.x, warp_id = tid / 32, lane = tid % 32;
  const int64_t b = blockIdx.z, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int nk = static_cast<int>(p.K / 64);
  const int64_t mtiles = (p.M + BM - 1) / BM;
  const int my_tiles = static_cast<int>(mtiles > blockIdx.y ? (mtiles - 1 - blockIdx.y) / groups + 1 : 0);
  const int steps = my_tiles * nk;
  // The CTA's entry and exit (flags bits 4-7: 13, every bit but bit 1,
  // unless MXVAL_WGMMA_ENTRY says otherwise; the four changes of
  // a16wfp4_wgmma_rs's entry, BENCHMARKS.md, "a16wfp4_wgmma's entry"):
  //  bit 0: the producer thread initializes the barriers right after its
  //         first weight loads are issued (no CTA barrier before them);
  //  bit 1: the ring's first two stages go right after those loads, the
  //         rest once the producer thread's weights have arrived;
  //  bit 2: the producer thread prefetches both tensor maps at entry;
  //  bit 3: at exit, wait only until the y stores have read shared memory.
  // Flags bit 1 / bit 2 (MXVAL_WGMMA_RING=first / last) fill the whole
  // ring before the panel or after all of it (both measured slower; kept
  // for A/B runs). With PDL (bit 0) the ring waits for the previous kernel,
  // after the panel.
  const bool pdl = flags & 1, ring_first = flags & 2, ring_last = flags & 4;
  const int entry = flags >> 4;
  const bool late_init = (entry & 1) && !ring_first;
  const int ring0 = !pdl && !ring_first && !ring_last && (entry & 2) ? 2 : STAGES;  // stages issued at once
  MXVAL_WT_ENTER(tid, my_tiles);  // resets slot 13 (racing the late init's panel only in trace builds)
  if ((entry & 4) && tid == 256) PrefetchTensorMaps(xmap, ymap);
  auto init_barriers = [&] {
    for (int s = 0; s < STAGES; ++s) {
      MbarInit(full + s, 1);
      MbarInit(empty + s, kPingPong ? 4 : 8);  // one arrival per consuming warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  };
  if (!late_init) {
    if (tid == 0) init_barriers();
    __syncthreads();
  }
  auto load = [&](int step) {
    const int stage = step % STAGES;
    const int m0 = static_cast<int>((blockIdx.y + static_cast<int64_t>(step / nk) * groups) * BM);
    MbarExpectTx(full + stage, C::kXStage);
    TmaLoad3d(xs + stage * C::kXStage, &xmap, (step % nk) * 64, m0, static_cast<int>(b), full + stage);
  };
  // Ring stages [from, to) (clipped to the CTA's steps), from the producer
  // thread. Launched with programmatic dependent launch (pdl), the panel
  // (weights only: not the previous kernel's output) is built while the
  // kernel before this one on the stream may still run; x is read and y
  // written only after it finished.
  auto fill_ring = [&](int from, int to) {
    if (tid == 256) {
      for (int s = from; s < to && s < steps; ++s) load(s);
    }
  };
  MXVAL_WT_MARK(1, tid == 0);
  // The x ring is filled right after the producer thread's first weight
  // loads are issued: at M <= 1024 the panel is most of a CTA's time, and
  // its loads queued behind 64-128 KB of x copies (0.2-0.6 us per call).
  if (!pdl && ring_first) fill_ring(0, STAGES);
  BuildPanel<BN>(p, panel, b, n0, tid, C::kThreads, [&](int phase) {
    if (late_init && phase == 0 && tid == 256) init_barriers();  // the panel's closing barrier publishes it
    if (pdl || ring_first || ring_last) return;
    if (phase == 0) fill_ring(0, ring0);
    if (phase == 1) fill_ring(ring0, STAGES);
  });
  if (!pdl && ring_last) fill_ring(0, STAGES);
  MXVAL_WT_MARK(2, tid == 0);
  if (pdl) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    fill_ring(0, STAGES);
  }

  if (warp_id == 8) {  // producer
    if (lane == 0) {
      for (int step = STAGES; step < steps; ++step) {
        MbarWait(empty + step % STAGES, ((step / STAGES) & 1) ^ 1);
        load(step);
      }
    }
    return;
  }
  const int wg = tid / 128, warp = (tid % 128) / 32;
  const uint32_t xs_addr = SmemAddr(xs), panel_addr = SmemAddr(panel);
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
  int pending = -1;  // the step whose stage an in-flight wgmma group still reads
  int out_buf = 0;   // TS: this warpgroup's staging area for the next tile
  for (int ti = kPingPong ? wg : 0; ti < my_tiles; ti += kPingPong ? 2 : 1) {
    // With PDL the next kernel may start its panel once this CTA begins its
    // last tile (as in a16wfp4_wgmma_rs: an early trigger slowed calls that
    // walk many tiles).
    if (pdl && ti + (kPingPong ? 2 : 1) >= my_tiles) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    for (int kc = 0; kc < nk; ++kc) {
      const int step = ti * nk + kc, st = step % STAGES;
      MbarWait(full + st, (step / STAGES) & 1);
      MXVAL_WT_MARK(3, tid == 0 && step == 0);
      MXVAL_WT_MARK(4, tid == 0 && step == nk - 1);
      if (MX) {
        // BM x 2 groups: one per thread of the consuming warpgroup(s).
        const int ct = kPingPong ? tid % 128 : tid;
        RequantSwizzledGroup(xs + st * C::kXStage, ct / 2, ct % 2);
        FenceProxyAsync();
        if (kPingPong) {
          NamedBarrier(1 + wg, 128);
        } else {
          NamedBarrier(1, 256);
        }
      }
      const uint32_t a_base = xs_addr + st * C::kXStage + (kPingPong ? 0 : wg * 64 * 128);
      const uint32_t b_base = panel_addr + kc * C::kPanelChunk;
      FenceRegs(acc);
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        Wgmma<BN>::Mma(acc, SmemDescSw128(a_base + kk * 32), SmemDescSw128(b_base + kk * 32), kc > 0 || kk > 0);
      }
      WgmmaCommit();
      if (kc != nk - 1) {
        WgmmaWait<1>();
        if (pending >= 0 && lane == 0) MbarArrive(empty + pending % STAGES);
        pending = step;
        continue;
      }
      WgmmaWait<0>();
      MXVAL_WT_MARK(5, tid == 0 && ti == 0);
      if (lane == 0) {
        if (pending >= 0) MbarArrive(empty + pending % STAGES);
        MbarArrive(empty + st);
      }
      pending = -1;
      FenceRegs(acc);
      const int64_t m0 = (blockIdx.y + static_cast<int64_t>(ti) * groups) * BM + (kPingPong ? 0 : wg * 64);
      if (!TS) {
        StoreTile<BN>(p, acc, b, m0, n0, warp, lane);
        continue;
      }
      // The staging area used `bufs` tiles ago must have been read by its
      // stores (the issuing thread waits, then the warpgroup syncs), the tile
      // goes in, is made visible to the async proxy, and one thread sends it.
      const bool issuer = tid % 128 == 0;
      if (issuer) {
        if (bufs == 2) {
          BulkWaitRead<1>();
        } else {
          BulkWaitRead<0>();
        }
      }
      NamedBarrier(3 + wg, 128);
      const uint32_t out = SmemAddr(ystage) + (out_buf * 2 + wg) * C::kOutWg;
      StageTileSw128<BN>(out, acc, warp, lane);
      FenceProxyAsync();
      NamedBarrier(3 + wg, 128);
      if (issuer && m0 < p.M) {
#pragma unroll
        for (int bx = 0; bx < BN / 64; ++bx) {
          if (n0 + 64 * bx < p.N) {  // rows past M, columns past N: clipped by the copy engine
            TmaStore3d(&ymap, ystage + (out_buf * 2 + wg) * C::kOutWg + bx * C::kOutBox, static_cast<int>(n0) + 64 * bx,
                       static_cast<int>(m0), static_cast<int>(b));
          }
        }
      }
      if (issuer) BulkCommit();
      MXVAL_WT_MARK(6, tid == 0 && ti == 0);
      out_buf = bufs == 2 ? out_buf ^ 1 : 0;
    }
  }
  WgmmaWait<0>();
  if (TS && tid % 128 == 0) {  // shared memory must outlive the stores' reads
    if (entry & 8) {
      BulkWaitRead<0>();
    } else {
      BulkWaitAll();
    }
  }
  MXVAL_WT_EXIT(tid);
}

// ---- Register-sourced weights ("a16wfp4_wgmma_rs", sm_90a): y^T = w x^T.
// The operands trade places. A consumer warpgroup owns 64 weight rows (N;
// 32 in the 32-row configs, see ROWS below) and keeps them, dequantized once, for the CTA's whole life as wgmma's A
// operand in registers (K/4 words per thread: all of K, so K is a template
// parameter); x streams through the TMA ring as the B operand (BM rows of
// M per stage, K-major, the same 128-byte-swizzled (BM x 64) chunks as
// a16wfp4_wgmma's), and each k16 step is one wgmma.m64nBMk16. No weight
// panel goes through shared memory (no stores, no fence, no CTA barrier
// before the first MMA), and shared memory feeds only x: 2 KB per
// 64 x 64 x 16 MMA at BM = 64 against a16wfp4_wgmma's 4 KB at BN = 64.
// A thread's A fragment holds the k pair (2t, 2t + 1) of every 8-wide k
// chunk (t = lane % 4): byte t of each packed word. It reads its row's
// 32-k group (16 bytes, shared by the quad) whole from the warpgroup's
// rows staged in shared memory, gathers byte t of the four words into one
// word (three byte permutes), and E2M1x8ViaMul (bit placement and a bf16x2
// multiply by 2^(S - 1)) turns that word into the row's four A words of the
// group (two k16 steps x two 8-k halves). The accumulator (64 n x BM m) is staged transposed with
// stmatrix.trans into a 128-byte-swizzled (BM x 64 n) box and stored by
// TMA. Rows past N load as zeros and are clipped by the copy engine, as are
// rows past M (read as zeros by the x copies).
// Split-K (NUM_KSPLIT = KS > 1): a cluster of KS CTAs shares (batch, weight
// rows, M tiles); CTA rank r holds K range [r K / KS, (r + 1) K / KS) in
// registers and streams only that range of x. Per tile, ranks 1..KS-1 write
// their fp32 accumulators into rank 0's shared memory with st.async, whose
// bytes complete rank 0's `red_full` mbarrier; rank 0 adds them in rank order
// (deterministic), frees the slots (a remote arrival on each rank's
// `red_free`, except after the last tile, when the other CTAs may be gone)
// and stores the tile. At small M this spreads one tile's dequantization
// and MMA chain over KS SMs.
__device__ __forceinline__ void StmatrixTrans4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// One warp's 16 accumulator rows (n = 16 warp + 0..15) of a 64 x BM tile
// into `out` as its transpose: BM rows (m) of 64 n (128 bytes, swizzled).
// A fragment 8 x 8 block (8 n x 8 m) is one stmatrix matrix; .trans stores
// it as 8 m rows of 8 n, i.e. one 16-byte chunk c = 2 warp + h of 8
// consecutive rows. Lane l addresses row l % 8 of matrix l / 8; the eight
// rows of a matrix land in eight different 16-byte bank groups.
template <int BM>
__device__ __forceinline__ void StageTileTransSw128(uint32_t out, const float (&acc)[BM / 2], int warp, int lane) {
  const int q = lane / 8, c = 2 * warp + q % 2;
#pragma unroll
  for (int j = 0; j < BM / 8; j += 2) {
    const int m = 8 * (j + q / 2) + lane % 8;
    StmatrixTrans4(out + Sw128(m, c), CvtBf16x2(acc[4 * j], acc[4 * j + 1]), CvtBf16x2(acc[4 * j + 2], acc[4 * j + 3]),
                   CvtBf16x2(acc[4 * j + 4], acc[4 * j + 5]), CvtBf16x2(acc[4 * j + 6], acc[4 * j + 7]));
  }
}

// The 32-row configs' tile: warp w's A rows 16 w .. 16 w + 7 (weight rows
// 8 w .. 8 w + 7; its other 8 rows are zeros and not stored) into `out` as
// BM rows (m) of 32 n (64 bytes), in TMA's 64-byte swizzle (16-byte chunk c
// of row m at chunk c ^ ((m / 2) % 4)): one 16-byte chunk c = w per row.
// Matrix q of each stmatrix.x4 is the 8 x 8 block (8 n x 8 m) of m block
// j + q; the eight rows of a matrix land in eight different bank groups.
__device__ __forceinline__ int Sw64(int r, int c) { return r * 64 + ((c ^ ((r >> 1) & 3)) << 4); }
template <int BM>
__device__ __forceinline__ void StageHalfTileTransSw64(uint32_t out, const float (&acc)[BM / 2], int warp, int lane) {
  const int q = lane / 8;
#pragma unroll
  for (int j = 0; j < BM / 8; j += 4) {
    const int m = 8 * (j + q) + lane % 8;
    StmatrixTrans4(out + Sw64(m, warp), CvtBf16x2(acc[4 * j], acc[4 * j + 1]), CvtBf16x2(acc[4 * j + 4], acc[4 * j + 5]),
                   CvtBf16x2(acc[4 * j + 8], acc[4 * j + 9]), CvtBf16x2(acc[4 * j + 12], acc[4 * j + 13]));
  }
}

// A weight row's scale bytes (kG of them, K / 32) as kG / W loads of W
// bytes each (W divides kG; srow W-aligned), kept packed as loaded:
// register i holds bytes [i * BPR, (i + 1) * BPR), BPR = min(W, 4). They
// are unpacked only where the conversion reads them (RsScaleByte): an
// unpack right after the loads made the warps wait for them before the
// CTA barrier (entry 0.70 -> 0.96 us at DeepSeek-V3 V-up M = 64).
// kG is even: the kernel's K (per CTA) is a multiple of 64.
constexpr int RsScaleWidth(int kg) { return kg % 16 == 0 ? 16 : kg % 8 == 0 ? 8 : kg % 4 == 0 ? 4 : 2; }
template <int KG, int W>
__device__ __forceinline__ void LoadScaleRowPacked(const uint8_t* srow, uint32_t (&out)[KG]) {
  static_assert(KG % 2 == 0 && KG % W == 0, "scale rows of an even number of groups, W dividing it");
  if constexpr (W == 16) {
#pragma unroll
    for (int j = 0; j < KG / 16; ++j) {
      const uint4 v = *reinterpret_cast<const uint4*>(srow + 16 * j);
      out[4 * j] = v.x, out[4 * j + 1] = v.y, out[4 * j + 2] = v.z, out[4 * j + 3] = v.w;
    }
  } else if constexpr (W == 8) {
#pragma unroll
    for (int j = 0; j < KG / 8; ++j) {
      const uint2 v = *reinterpret_cast<const uint2*>(srow + 8 * j);
      out[2 * j] = v.x, out[2 * j + 1] = v.y;
    }
  } else if constexpr (W == 4) {
#pragma unroll
    for (int j = 0; j < KG / 4; ++j) out[j] = *reinterpret_cast<const uint32_t*>(srow + 4 * j);
  } else {
#pragma unroll
    for (int j = 0; j < KG / 2; ++j) out[j] = *reinterpret_cast<const uint16_t*>(srow + 2 * j);
  }
}
template <int W>
__device__ __forceinline__ uint32_t RsScaleByte(const uint32_t* packed, int gi) {
  constexpr int kBpr = W < 4 ? W : 4;  // bytes per register as loaded
  return (packed[gi / kBpr] >> (8 * (gi % kBpr))) & 0xFFu;
}

// BM: x rows per tile (wgmma N); WGS: consumer warpgroups (64 weight rows
// each, all on the same x tile); the kernel's MINB: CTAs per SM the
// registers are budgeted for. One consumer warpgroup comes with a producer warp (160
// threads, up to 255 registers each); two come with a producer warpgroup
// (384 threads, 168 registers each at entry) that hands registers over with
// setmaxnreg: 40 for the producer, 232 for each consumer (40 + 2 x 232 =
// 3 x 168), so two warpgroups can each hold K = 512 of A fragments and a
// 64 x 128 accumulator, sharing every x chunk (x is read from L2 half as
// often as with 64 weight rows per CTA). Two or four warpgroups on the
// same 64 rows, each holding a K range (partial tiles added in shared
// memory), measured no faster than one at M <= 256 and slower above: the
// prologue is issue-bound per SM, not latency-bound per warp (BENCHMARKS.md,
// "k-split warpgroups and TMA L2 hints").
template <int WGS>
constexpr int RsThreads() {
  return WGS == 1 ? 160 : 384;
}
// K: the K range a CTA holds (all of K, or K / KS with split-K).
template <int BM, int WGS, int STAGES, int K, int KS = 1>
struct RsConfig {
  // kWPitch: a staged weight row (K/2 bytes) plus 16, so the eight rows a
  // warp reads at once fall in eight different 16-byte bank groups.
  // kRedSlot: one rank's fp32 partial tile (every consumer thread's BM/2
  // accumulators), KS - 1 of them (on every rank, used on rank 0).
  static constexpr int kXStage = BM * 128, kOut = BM * 128, kWPitch = K / 2 + 16;
  static constexpr int kRedSlot = KS > 1 ? 128 * WGS * (BM / 2) * 4 : 0;
  static size_t Smem(int bufs) {
    return 1024 + size_t{STAGES} * kXStage + static_cast<size_t>(bufs) * WGS * kOut + size_t{WGS} * 64 * kWPitch +
           size_t{KS - 1} * kRedSlot + (2 * STAGES + 3) * sizeof(uint64_t);
  }
  static_assert(BM % 32 == 0 && BM <= 256 && STAGES >= 2, "wgmma N and TMA box limits");
  static_assert(WGS == 1 || WGS == 2, "one consumer warpgroup with a producer warp, or two with a producer warpgroup");
  static_assert(KS >= 1 && KS <= 8, "a portable cluster holds at most 8 CTAs");
};

// K: the K range this CTA holds in registers (K / KS of the problem's K
// with split-K over a cluster of KS CTAs along x).
// ROWS: weight rows per consumer warpgroup, 64 (wgmma's M) or 32. With 32
// ("half" configs, BLOCK_SIZE_N = 32; one warpgroup, no split-K) warp w's
// A rows 16 w .. 16 w + 7 hold weight rows 8 w .. 8 w + 7 and its rows
// 16 w + 8 .. 16 w + 15 are zeros: each thread dequantizes one row instead
// of two, so a CTA's prologue (weight rows, A fragments) halves while its
// MMAs stay the same. For grids that leave SMs idle (V-up at M <= 64: 64 CTAs
// of 64 rows on 132 SMs), twice the CTAs each do half the dequantization.
// 16-row configs (lanes 16-31 converting the upper half of K of lanes
// 0-15's rows and handing it over through shared memory) measured 1.03-1.09x
// the 32-row configs' time at DeepSeek-V3 V-up M = 24-64 (BENCHMARKS.md,
// twenty-seventh session; bench/results/h200_rs16_rows_and_producer_init_2026-12-04.patch).
template <int BM, int WGS, int K, int KS, int STAGES, bool MX, int MINB, int ROWS = 64>
__global__ void __launch_bounds__(RsThreads<WGS>(), MINB)
    A16wfp4WgmmaRsKernel(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap ymap,
                         GemmParams p, int groups, int bufs, int flags) {
  using C = RsConfig<BM, WGS, STAGES, K, KS>;
  constexpr int kConsumers = 128 * WGS, kNk = K / 64, kG = K / 32;
  constexpr bool kHalf = ROWS == 32;
  constexpr int kH = kHalf ? 1 : 2;  // weight rows per thread
  static_assert(K % 64 == 0 && K <= 512, "K is held in registers, in 64-wide x chunks");
  static_assert(ROWS == 64 || (ROWS == 32 && WGS == 1 && KS == 1), "32-row configs: one warpgroup, no split-K");
  static_assert(BM % 64 == 0 || ROWS == 32, "32-row x tiles (wgmma n32) come with the 32-row configs only");
  extern __shared__ uint4 rs_smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(rs_smem_raw);
  smem += ((SmemAddr(smem) + 1023u) & ~1023u) - SmemAddr(smem);
  uint8_t* xs = smem;
  uint8_t* ystage = xs + STAGES * C::kXStage;
  uint8_t* wstage = ystage + bufs * WGS * C::kOut;  // WGS x 64 staged weight rows
  uint8_t* red = wstage + WGS * 64 * C::kWPitch;    // split-K partial tiles (rank 0's are read)
  uint64_t* full = reinterpret_cast<uint64_t*>(red + (KS - 1) * C::kRedSlot);
  uint64_t* empty = full + STAGES;
  uint64_t* red_full = empty + STAGES;  // split-K: rank 0 waits for the KS - 1 partial tiles
  uint64_t* red_free = red_full + 1;    // split-K: rank r > 0 waits until rank 0 has read its slot
  uint64_t* wready = red_free + 1;      // entry bit 1: the weight rows have landed (one arrival per consumer warp)
  const int tid = threadIdx.x, lane = tid % 32;
  const int rank = KS > 1 ? static_cast<int>(ClusterRank()) : 0;
  const int64_t b = blockIdx.z, n0 = static_cast<int64_t>(blockIdx.x / KS) * (ROWS * WGS);
  const int k0 = rank * K;  // this CTA's K range starts here
  const int64_t mtiles = (p.M + BM - 1) / BM;
  const int my_tiles = static_cast<int>(mtiles > blockIdx.y ? (mtiles - 1 - blockIdx.y) / groups + 1 : 0);
  const int steps = my_tiles * kNk;
  const bool pdl = flags & 1;
#if defined(MXVAL_RS_ABLATION)
  // Ablation build only (scripts/build_rs_ablation.sh; never the shipped
  // library): flags bits 1-3 drop the MMAs (1), the y stores (2) or the x
  // copies (4), so bench/probe_bounds.py --parts ablate can time what each
  // part of the traffic and the work costs by itself. Outputs are wrong.
  // (ptxas injects warpgroup.arrive around the now-conditional wgmma, C7519:
  // with no bit set this build measured up to 15% slower than the shipped one.)
  const int ablate = flags >> 1;
#else
  constexpr int ablate = 0;
#endif
  // The CTA's entry and exit (flags bits 4-7, all set unless MXVAL_RS_ENTRY
  // says otherwise; BENCHMARKS.md, "The register-sourced kernel's entry"):
  //  bit 0: the consumers issue their weight rows' copies before the barrier
  //         init, so the producer's x copies queue behind them in DRAM;
  //  bit 1: x stages from the third on are issued once the weight rows have
  //         landed (the first two go at once);
  //  bit 2: the producer prefetches both tensor maps at entry (the first y
  //         store no longer waits for its descriptor);
  //  bit 3: at exit, wait only until the y stores have read shared memory.
  // Together 0.90-0.95x the time of the entry without them on every
  // register-sourced row at M = 64 / 256 / 1024 on the H200.
  const int xexp = (flags >> 4) & 15;
  // With bit 1: how many x stages go before the weight rows have landed
  // (flags bits 8-11, MXVAL_RS_XEARLY; 0 = 2).
  const int xearly = (flags >> 8) & 15 ? (flags >> 8) & 15 : 2;
  MXVAL_WT_ENTER(tid, my_tiles);  // resets slot 13 before the barrier below
  const int wg = tid / 128, warp = (tid % 128) / 32, t = lane % 4, wtid = tid % 128;
  uint8_t* wrows = wstage + wg * 64 * C::kWPitch;
  auto issue_weights = [&]() {
#pragma unroll
    for (int u = 0; u < (ROWS * kG + 127) / 128; ++u) {
      const int i = wtid + 128 * u, r = i / kG, gi = i % kG;
      const int64_t n = n0 + ROWS * wg + r;
      const bool ok = i < ROWS * kG && n < p.N;
      if (i < ROWS * kG) {
        CpAsync16(wrows + r * C::kWPitch + 16 * gi, ok ? p.wp + b * p.wp_sb + n * p.wp_sn + k0 / 2 + 16 * gi : p.wp,
                  ok ? 16 : 0);
      }
    }
    CpAsyncCommit();
  };
  // This thread's staged weight rows: r0 (A row 16 warp + lane / 4) and,
  // with 64 rows, r0 + 8 (A row + 8); their scale bytes.
  const int r0 = (kHalf ? 8 : 16) * warp + lane / 4;
  uint32_t sc[kH][kG];
  // A row's kG scale bytes in kG / W loads of W bytes (W: the largest power
  // of two up to 16 dividing kG) when every row's bytes are W-aligned, as
  // dense scales are: one 16-byte load per row at K = 512 instead of 16
  // byte loads. Same-process A/Bs against the byte loads on the H200, two
  // runs: 0.984-1.001 of the time at M = 256 on the four model shapes (7 of
  // 8 at most 0.992), 0.978-1.016 at M = 64, level from M = 1024
  // (BENCHMARKS.md, thirtieth session). Flags
  // bit 17 (MXVAL_RS_SCALES=bytes, read per call): the byte loads, for A/Bs;
  // rows that are not W-aligned always take them.
  constexpr int kSW = RsScaleWidth(kG);
  const bool scales_vec =
      !((flags >> 17) & 1) && ((reinterpret_cast<uintptr_t>(p.ws) | static_cast<uint64_t>(p.ws_sb) |
                                static_cast<uint64_t>(p.ws_sn)) % kSW) == 0;
  auto load_scales = [&]() {
#pragma unroll
    for (int h = 0; h < kH; ++h) {
      const int64_t n = n0 + ROWS * wg + r0 + 8 * h;
      const uint8_t* srow = p.ws + b * p.ws_sb + n * p.ws_sn + k0 / 32;
      if (n >= p.N) {  // past N: code 0 with scale 2^0 (in either packing)
#pragma unroll
        for (int gi = 0; gi < kG; ++gi) sc[h][gi] = 0x7F7F7F7Fu;
      } else if (scales_vec) {
        LoadScaleRowPacked<kG, kSW>(srow, sc[h]);
      } else {
#pragma unroll
        for (int gi = 0; gi < kG; ++gi) sc[h][gi] = srow[gi];
      }
    }
  };
  // The scale loads go out right behind the weight rows' copies, before
  // the barrier init, so their address math and issue no longer sit
  // between the barrier and the wait for the rows. Same-process A/B on the
  // H200, two runs: 0.967-0.989 of the time on 11 of the 12 rows at
  // M <= 1024 this kernel serves (geomean 0.983 / 0.980; the twelfth,
  // DeepSeek-V3 K-up M = 1024 on two warpgroups, 1.006-1.009), level at
  // M = 16384 (BENCHMARKS.md, "scale loads moved up with the weight rows").
  // Flags bit 16 (MXVAL_RS_SCALES=late, read per call, for A/Bs): the order
  // before, after the barrier init.
  const bool scales_early = !((flags >> 16) & 1);
  if ((xexp & 4) && tid == kConsumers) PrefetchTensorMaps(xmap, ymap);
  if ((xexp & 1) && tid < kConsumers) issue_weights();
  if (scales_early && tid < kConsumers) load_scales();
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      MbarInit(full + s, 1);
      MbarInit(empty + s, 4 * WGS);  // one arrival per consuming warp
    }
    MbarInit(red_full, 1);          // rank 0's expect-tx; the partial tiles' bytes complete it
    MbarInit(red_free, 4 * WGS);    // one arrival per consumer warp of rank 0
    MbarInit(wready, 4 * WGS);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (KS > 1) {
    ClusterSync();  // no remote arrival before the cluster's barriers are initialized
  } else {
    __syncthreads();
  }
  MXVAL_WT_MARK(1, tid == 0);

  if (tid >= kConsumers) {  // the producer warp(group): one thread runs the x ring
    if (WGS == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == kConsumers) {
      // With programmatic dependent launch, x (maybe the previous kernel's
      // output) is read only once that kernel has finished.
      if (pdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");
      for (int step = 0; step < steps; ++step) {
        const int st = step % STAGES;
        if (step >= STAGES) MbarWait(empty + st, ((step / STAGES) & 1) ^ 1);
        if ((xexp & 2) && step == xearly) MbarWait(wready, 0);
        const int m0 = static_cast<int>((blockIdx.y + static_cast<int64_t>(step / kNk) * groups) * BM);
        if (ablate & 4) {
          MbarArrive(full + st);
          continue;
        }
        MbarExpectTx(full + st, C::kXStage);
        TmaLoad3d(xs + st * C::kXStage, &xmap, k0 + (step % kNk) * 64, m0, static_cast<int>(b), full + st);
      }
    }
    return;
  }

  if (WGS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  // 1. This thread's A fragments for all of K (rows r and r + 8 of the
  //    warpgroup's 64). The warpgroup's packed rows are copied into shared
  //    memory first (cp.async, each byte once, rows past N zero-filled), so
  //    no loads hold registers in flight (16-byte loads straight into
  //    registers held 4 x K/16 of them next to the K/4 of A; they measured
  //    the same speed, BENCHMARKS.md). Scale groups past K/32 are never read.
  if (!(xexp & 1)) issue_weights();
  MXVAL_WT_MARK(14, tid == 0);
  uint32_t wa[K / 16][4];
  {
    if (!scales_early) load_scales();
    MXVAL_WT_MARK(11, tid == 0);
    CpAsyncWait<0>();
    NamedBarrier(2 + wg, 128);
    if ((xexp & 2) && lane == 0) MbarArrive(wready);
    MXVAL_WT_MARK(12, tid == 0);
#if defined(MXVAL_WGMMA_TRACE)
    {  // slot 19: thread 0's scale bytes have all arrived (the mark waits for them)
      // A sum, not an OR: since the scale bytes are loaded packed (four per
      // word), ORing the words gave all ones on most rows (scale bytes 0x7F
      // and 0x80 side by side), which skipped the mark and left the slot 0.
      uint32_t all = 0;
#pragma unroll
      for (int h = 0; h < kH; ++h)
#pragma unroll
        for (int gi = 0; gi < kG; ++gi) all += sc[h][gi];
      MXVAL_WT_MARK(19, tid == 0 && all != 0x9E3779B9u);  // false only by a 2^-32 coincidence
    }
#endif
    const uint32_t sel = static_cast<uint32_t>(t) | static_cast<uint32_t>(t + 4) << 4;  // byte t of each word
    // The row's group gi as the 8 codes this thread holds.
    auto gathered = [&](int h, int gi) {
      const uint4 v = *reinterpret_cast<const uint4*>(wrows + (r0 + 8 * h) * C::kWPitch + 16 * gi);
      return BytePerm(BytePerm(v.x, v.y, sel), BytePerm(v.z, v.w, sel), 0x5410u);
    };
    // 8-k chunk c of group gi: k16 step 2 gi + c / 2, half c % 2.
    auto place = [&](int h, int gi, const U32x4& d) {
      wa[2 * gi][h] = d.v[0];
      wa[2 * gi][2 + h] = d.v[1];
      wa[2 * gi + 1][h] = d.v[2];
      wa[2 * gi + 1][2 + h] = d.v[3];
    };
    // Every group through the placement and multiply first; groups whose
    // scale byte it does not cover (2^2 and above, NaN: rare) are redone by
    // the prmt tables or the exact float path in a second pass that runs
    // only when needed.
    // With the exact path inline in every unrolled group the prologue was
    // several times larger (it is straight-line code run once per CTA) and
    // K = 512 took 12.4 instead of 8.0 us at V-up M = 256 (BENCHMARKS.md,
    // "Register-sourced weights": instruction fetch).
    // Building each chunk's fragments just before its MMAs in the first tile
    // (so integer and tensor-core work overlap) was measured slower on every
    // V-up row, 1.18-1.23x at M <= 256 and 1.02-1.10x at M = 1024-16384, with
    // the later tiles slowed too (BENCHMARKS.md, "Prologue dequantization"),
    // and again on the 32-row configs at M <= 64, 1.08-1.13x with ptxas
    // reporting no wgmma serialization (BENCHMARKS.md, "32 weight rows per
    // warpgroup"; bench/results/h200_rs32_pipe_2026-12-02.patch). Why:
    // on the H200 only 25-37% of integer work hides behind a wgmma chain,
    // whether A is in registers or shared memory and whichever warpgroup
    // issues it (bench/rs_overlap_probe.cu), so the upfront batch, whose
    // dependency chains overlap each other, is the better schedule.
    // The conversion grows with the groups a thread converts. Through the
    // prmt tables (E2M1x8ViaTables: about 32 instructions and 59 cycles per
    // group, one warp per scheduler) it took 0.60 / 1.04-1.07 us at 16 / 32
    // groups; bit placement and a bf16x2 multiply (E2M1x8ViaMul, at most 13
    // integer instructions per group beside the gather) take 0.40 / 0.67 and made
    // the V-up rows at M <= 256 3-6% faster (BENCHMARKS.md, "Placement and
    // multiply", twenty-eighth session). A
    // shared-memory table of the 256 byte values' code pairs (one lookup and
    // one bf16x2 multiply per word, no gather) was exact but slower: filling
    // it cost more than it saved at 32 rows, and at 64 rows the conversion
    // did not get faster (BENCHMARKS.md, "Small-M V-up", twenty-seventh
    // session; bench/results/h200_rs_pair_lookup_dequant_2026-12-04.patch).
    bool rare = false;
    if (kHalf) {  // A rows 16 warp + 8 .. 16 warp + 15: zeros
#pragma unroll
      for (int s = 0; s < K / 16; ++s) wa[s][1] = wa[s][3] = 0u;
    }
#pragma unroll
    for (int h = 0; h < kH; ++h)
#pragma unroll
      for (int gi = 0; gi < kG; ++gi) {
        const uint32_t s = scales_vec ? RsScaleByte<kSW>(sc[h], gi) : sc[h][gi] & 0xFFu;
        rare |= !E2M1MulCover(s);
        place(h, gi, E2M1x8ViaMul(gathered(h, gi), E2M1MulScale(s)));
      }
    if (rare) {  // the scale bytes are read again: keeping them live spilled (two warpgroups, K = 512)
#pragma unroll
      for (int h = 0; h < kH; ++h) {
        const int64_t n = n0 + ROWS * wg + r0 + 8 * h;
        const uint8_t* srow = p.ws + b * p.ws_sb + n * p.ws_sn + k0 / 32;
#pragma unroll
        for (int gi = 0; gi < kG; ++gi) {
          const uint32_t s = n < p.N ? srow[gi] : 127u;
          if (!E2M1MulCover(s)) place(h, gi, DequantBytes8Prmt(gathered(h, gi), s));
        }
      }
    }
  }
  MXVAL_WT_MARK(2, tid == 0);
  MXVAL_WT_MAX(13);
  if (pdl) {  // y may be read by the kernel before this one: store only after it finished
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
  }

  // 2. The tiles: one wgmma group per x chunk, one group left in flight
  //    across chunks; a stage is released once the group reading it retired.
  const uint32_t xs_addr = SmemAddr(xs);
  float acc[BM / 2];
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) acc[i] = 0.f;
  int pending = -1, out_buf = 0;
  for (int ti = 0; ti < my_tiles; ++ti) {
    // With PDL the next kernel may start once this CTA begins its last tile
    // (right after the prologue when it has one tile). Triggering right
    // after the prologue at every M made 8 of 9 calls at M >= 4096 1-13%
    // slower than a plain launch; at the last tile they are 0.95-1.06 of it
    // and the small-M gain is kept (BENCHMARKS.md, "Programmatic dependent
    // launch on every kernel").
    // Flags bit 18 (WgmmaRsRun's rule, or MXVAL_RS_PDL): no explicit
    // trigger, so the next kernel's CTAs launch only as this one's exit.
    // Dropped by default only on two-warpgroup configs holding K >= 512 with
    // 8+ tiles per CTA (GLM-5 V-up M >= 4096: 0.94-0.97 of the time with the
    // trigger here); everywhere else it cost 1.02-1.23 or was level
    // (BENCHMARKS.md, thirty-first and thirty-second sessions). Releasing
    // 1 or 3 tiles before the last was level at K-up and 1.02-1.14 slower
    // at DeepSeek-V3 V-up (thirty-third session): the last tile it is.
    if (pdl && ti == my_tiles - 1 && !((flags >> 18) & 1)) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#pragma unroll
    for (int q = 0; q < 3; ++q) MXVAL_WT_STAMP(16 + q, GlobalTimerNs(), tid == 0 && ti == (q + 1) * my_tiles / 4);
#pragma unroll
    for (int kc = 0; kc < kNk; ++kc) {
      const int step = ti * kNk + kc, st = step % STAGES;
      MbarWait(full + st, (step / STAGES) & 1);
      MXVAL_WT_MARK(3, tid == 0 && step == 0);
      MXVAL_WT_MARK(4, tid == 0 && step == kNk - 1);
      if (MX) {  // each of the stage's BM x 2 groups re-quantized by one consumer thread
        for (int q = tid; q < BM * 2; q += kConsumers) RequantSwizzledGroup(xs + st * C::kXStage, q / 2, q % 2);
        FenceProxyAsync();
        NamedBarrier(1, kConsumers);
      }
      const uint32_t x_base = xs_addr + st * C::kXStage;
      FenceRegs(acc);
      WgmmaFence();
      if (!(ablate & 1)) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          WgmmaRs<BM>::Mma(acc, wa[4 * kc + kk], SmemDescSw128(x_base + kk * 32), kc > 0 || kk > 0);
        }
      }
      WgmmaCommit();
      if (kc != kNk - 1) {
        WgmmaWait<1>();
        if (pending >= 0 && lane == 0) MbarArrive(empty + pending % STAGES);
        pending = step;
        continue;
      }
      WgmmaWait<0>();
      MXVAL_WT_MARK(5, tid == 0 && ti == 0);
      if (lane == 0) {
        if (pending >= 0) MbarArrive(empty + pending % STAGES);
        MbarArrive(empty + st);
      }
      pending = -1;
      FenceRegs(acc);
      if (KS > 1) {
        // Split-K: thread tid's accumulators go to the same thread of rank 0,
        // 16 bytes per store, consecutive threads in consecutive 16 bytes.
        if (rank != 0) {
          if (ti > 0) MbarWait<true>(red_free, (ti - 1) & 1);  // rank 0 has read tile ti - 1
          const uint32_t dst = ClusterMap(SmemAddr(red + (rank - 1) * C::kRedSlot), 0);
          const uint32_t bar = ClusterMap(SmemAddr(red_full), 0);
#pragma unroll
          for (int i = 0; i < BM / 2; i += 4) {
            StAsyncF32x4(dst + ((i / 4) * kConsumers + tid) * 16, acc[i], acc[i + 1], acc[i + 2], acc[i + 3], bar);
          }
          MXVAL_WT_MARK(6, tid == 0 && ti == 0);
          continue;  // rank 0 stores the tile
        }
        // Bytes may land before this expect-tx (the count goes negative);
        // they cannot belong to the next tile, which waits for red_free.
        if (tid == 0) MbarExpectTx(red_full, (KS - 1) * C::kRedSlot);
        MbarWait<true>(red_full, ti & 1);
        MXVAL_WT_MARK(15, tid == 0 && ti == 0);
#pragma unroll
        for (int r = 1; r < KS; ++r) {
          const float4* part = reinterpret_cast<const float4*>(red + (r - 1) * C::kRedSlot);
#pragma unroll
          for (int i = 0; i < BM / 2; i += 4) {
            const float4 v = part[(i / 4) * kConsumers + tid];
            acc[i] += v.x;
            acc[i + 1] += v.y;
            acc[i + 2] += v.z;
            acc[i + 3] += v.w;
          }
        }
        if (ti + 1 < my_tiles) {  // after the last tile the other ranks may have exited
          __syncwarp();             // the warp's reads are done before its slot is released
          if (lane == 0) {
#pragma unroll
            for (int r = 1; r < KS; ++r) MbarArriveRemote(ClusterMap(SmemAddr(red_free), r));
          }
        }
      }
      // The staging area used `bufs` tiles ago must have been read by its
      // store (the issuing thread waits, the warpgroup syncs); the tile goes
      // in, is made visible to the async proxy, and one thread sends it.
      const int64_t m0 = (blockIdx.y + static_cast<int64_t>(ti) * groups) * BM;
      const bool issuer = tid % 128 == 0;
      if (issuer) {
        if (bufs == 2) {
          BulkWaitRead<1>();
        } else {
          BulkWaitRead<0>();
        }
      }
      NamedBarrier(2 + wg, 128);
      const int slot = out_buf * WGS + wg;
      if (kHalf) {
        StageHalfTileTransSw64<BM>(SmemAddr(ystage) + slot * C::kOut, acc, warp, lane);
      } else {
        StageTileTransSw128<BM>(SmemAddr(ystage) + slot * C::kOut, acc, warp, lane);
      }
      FenceProxyAsync();
      NamedBarrier(2 + wg, 128);
      if (issuer) {
        if (n0 + ROWS * wg < p.N && !(ablate & 2)) {
          TmaStore3d(&ymap, ystage + slot * C::kOut, static_cast<int>(n0) + ROWS * wg, static_cast<int>(m0),
                     static_cast<int>(b));
        }
        BulkCommit();
      }
      MXVAL_WT_MARK(6, tid == 0 && ti == 0);
      out_buf = bufs == 2 ? out_buf ^ 1 : 0;
    }
  }
  WgmmaWait<0>();
  if (tid % 128 == 0) {  // shared memory must outlive the stores' reads
    if (xexp & 8) {
      BulkWaitRead<0>();
    } else {
      BulkWaitAll();
    }
  }
  MXVAL_WT_EXIT(tid);
}

// Compiled variants: (warpgroups along M, BN, stages). Up to STAGES - 2
// chunks are in flight per CTA; the deep rings (8-12 stages) were added
// on the guess that latency set the rate, and measured no faster
// (BENCHMARKS.md, "Hopper kernel"): they stay as tuning options.
#define MXVAL_WG_CONFIGS(X) \
  X(2, 128, 4)              \
  X(2, 128, 5)              \
  X(2, 128, 6)              \
  X(2, 128, 11)             \
  X(2, 256, 8)              \
  X(2, 64, 10)              \
  X(1, 128, 12)
struct WgEntry {
  mxval_tile_config config;
  size_t (*smem)(int64_t K);
  void (*kernel)(GemmParams, int);     // bf16 activations
  void (*kernel_mx)(GemmParams, int);  // mxfp4-even
};
#define MXVAL_WG_ENTRY(WGS, BN, ST)                                                                    \
  {{64 * WGS, BN, 64, 1, ST, 4 * WGS}, WgConfig<WGS, BN, ST>::Smem, A16wfp4WgmmaKernel<WGS, BN, ST, false>, \
   A16wfp4WgmmaKernel<WGS, BN, ST, true>},
const WgEntry kWgEntries[] = {MXVAL_WG_CONFIGS(MXVAL_WG_ENTRY)};
#undef MXVAL_WG_ENTRY
constexpr int kNumWg = sizeof(kWgEntries) / sizeof(kWgEntries[0]);

// TMA-fed variants: (BM, BN, stages); listed with num_warps = 9 (8
// consumer warps and the producer warp). BM = 64 is the ping-pong variant.
#define MXVAL_WT_CONFIGS(X) \
  X(128, 128, 3)            \
  X(128, 128, 4)            \
  X(128, 128, 6)            \
  X(128, 256, 6)            \
  X(128, 64, 6)             \
  X(128, 64, 8)             \
  X(128, 64, 10)            \
  X(64, 128, 12)            \
  X(64, 256, 12)            \
  X(64, 64, 20)
using WtKernel = void (*)(CUtensorMap, CUtensorMap, GemmParams, int, int, int);
struct WtEntry {
  mxval_tile_config config;
  size_t (*smem)(int64_t K, int bufs);
  WtKernel kernel[2][2];  // [mxfp4-even][TMA-store epilogue]
};
#define MXVAL_WT_ENTRY(BM, BN, ST)                                                                    \
  {{BM, BN, 64, 1, ST, 9},                                                                            \
   WtConfig<BM, BN, ST>::Smem,                                                                        \
   {{A16wfp4WgmmaTmaKernel<BM, BN, ST, false, false>, A16wfp4WgmmaTmaKernel<BM, BN, ST, false, true>}, \
    {A16wfp4WgmmaTmaKernel<BM, BN, ST, true, false>, A16wfp4WgmmaTmaKernel<BM, BN, ST, true, true>}}},
const WtEntry kWtEntries[] = {MXVAL_WT_CONFIGS(MXVAL_WT_ENTRY)};
#undef MXVAL_WT_ENTRY
constexpr int kNumWt = sizeof(kWtEntries) / sizeof(kWtEntries[0]);

// Register-sourced variants: (BM, consumer warpgroups, stages, CTAs per SM
// budgeted, K). num_warps = 5 (one consumer warpgroup and the producer
// warp) or 12 (two and the producer warpgroup), BLOCK_SIZE_N = 64 x
// consumer warpgroups (32 for the 32-row variants further down). Every
// one is compiled for K in {128, 192, 256, 512} (A fragments: K/4 registers; accumulators: BM/2; budgets of 232 and 255
// registers, 168 for two 160-thread CTAs per SM, so the 64-row variant
// runs one CTA per SM at K = 512). The rings are deep: with 4 stages (half
// a K = 512 tile) GLM-5 V-up M = 16384 took 141 us, with 8 122 us
// (BENCHMARKS.md, "Register-sourced weights").
// Split-K variants (NUM_KSPLIT = cluster size; a CTA holds K / NUM_KSPLIT):
// for small M, where one CTA per (batch, 64 weight rows, M tile) leaves
// SMs idle and its prologue and MMA chain are the call's latency. They are
// compiled for the K of the model shapes that K / NUM_KSPLIT keeps a
// multiple of 64: 128 / 256 / 512 (two ranks, 64 rows), 512 (four ranks,
// 4 stages: two CTAs fit an SM), 256 / 512 (two ranks, 128 rows). On the
// model shapes at M <= 256 they measured slower than the unsplit configs
// (the entry cluster barrier, later weight rows and the partial tile's
// transfer cost more than the halved prologue saves: BENCHMARKS.md, "Split-K
// over a thread-block cluster"); no table bucket uses them.
#define MXVAL_RS_K(X, BM, WGS, ST, MINB, MINB512) \
  X(BM, WGS, ST, MINB, 1, 128) X(BM, WGS, ST, MINB, 1, 192) X(BM, WGS, ST, MINB, 1, 256) X(BM, WGS, ST, MINB512, 1, 512)
#define MXVAL_RS_CONFIGS(X)                                                                                       \
  MXVAL_RS_K(X, 128, 2, 8, 1, 1) MXVAL_RS_K(X, 128, 1, 8, 1, 1) MXVAL_RS_K(X, 64, 1, 10, 2, 1) X(64, 1, 8, 2, 2, 128) \
  X(64, 1, 8, 2, 2, 256) X(64, 1, 8, 2, 2, 512) X(64, 1, 4, 2, 4, 512) X(128, 1, 8, 1, 2, 256) X(128, 1, 8, 1, 2, 512)
// 32-row variants (BLOCK_SIZE_N = 32, one warpgroup): (BM, stages, CTAs
// per SM budgeted, K), for the small-M grids that leave SMs idle; BM = 32
// (wgmma n32) also halves the MMA chain of a tile at M <= 32.
#define MXVAL_RS_HALF_CONFIGS(X)                                                           \
  X(64, 10, 2, 128) X(64, 10, 2, 192) X(64, 10, 2, 256) X(64, 10, 1, 512) X(32, 10, 2, 128) \
  X(32, 10, 2, 192) X(32, 10, 2, 256) X(32, 10, 1, 512)
struct RsEntry {
  mxval_tile_config config;
  int K;
  size_t (*smem)(int bufs);
  WtKernel kernel[2];  // [mxfp4-even]
};
#define MXVAL_RS_ENTRY(BM, WGS, ST, MINB, KS, K)       \
  {{BM, 64 * WGS, 64, KS, ST, RsThreads<WGS>() / 32}, \
   K,                                                 \
   RsConfig<BM, WGS, ST, K / KS, KS>::Smem,           \
   {A16wfp4WgmmaRsKernel<BM, WGS, K / KS, KS, ST, false, MINB>, A16wfp4WgmmaRsKernel<BM, WGS, K / KS, KS, ST, true, MINB>}},
#define MXVAL_RS_HALF_ENTRY(BM, ST, MINB, K)                                                 \
  {{BM, 32, 64, 1, ST, RsThreads<1>() / 32},                                                 \
   K,                                                                                        \
   RsConfig<BM, 1, ST, K>::Smem,                                                             \
   {A16wfp4WgmmaRsKernel<BM, 1, K, 1, ST, false, MINB, 32>, A16wfp4WgmmaRsKernel<BM, 1, K, 1, ST, true, MINB, 32>}},
const RsEntry kRsEntries[] = {MXVAL_RS_CONFIGS(MXVAL_RS_ENTRY) MXVAL_RS_HALF_CONFIGS(MXVAL_RS_HALF_ENTRY)};
#undef MXVAL_RS_ENTRY
#undef MXVAL_RS_HALF_ENTRY
constexpr int kNumRs = sizeof(kRsEntries) / sizeof(kRsEntries[0]);

// The entry compiled for this config (NUM_KSPLIT included: it is the
// cluster size) and K, or null; `config_known` says whether the config is
// compiled for some K.
bool SameRsConfig(const mxval_tile_config& a, const mxval_tile_config* c) {
  return SameConfig(a, c) && a.ksplit == c->ksplit;
}
const RsEntry* FindRs(const mxval_tile_config* c, int64_t K, bool* config_known) {
  *config_known = false;
  for (const RsEntry& e : kRsEntries) {
    if (!SameRsConfig(e.config, c)) continue;
    *config_known = true;
    if (e.K == K) return &e;
  }
  return nullptr;
}
// The distinct configs, in table order.
const mxval_tile_config* RsConfigList(int32_t* n) {
  static mxval_tile_config configs[kNumRs];
  static int32_t count = [] {
    int32_t c = 0;
    for (const RsEntry& e : kRsEntries) {
      bool seen = false;
      for (int32_t i = 0; i < c; ++i) seen = seen || SameRsConfig(configs[i], &e.config);
      if (!seen) configs[c++] = e.config;
    }
    return c;
  }();
  *n = count;
  return configs;
}

const mxval_tile_config* WgConfigList() {
  static mxval_tile_config configs[kNumWg + kNumWt];
  for (int i = 0; i < kNumWg; ++i) configs[i] = kWgEntries[i].config;
  for (int i = 0; i < kNumWt; ++i) configs[kNumWg + i] = kWtEntries[i].config;
  return configs;
}

// cuTensorMapEncodeTiled from the driver (the runtime hands out the entry
// point, so the library does not link libcuda), or null.
using TensorMapEncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                       const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                       CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
TensorMapEncodeFn TensorMapEncoder() {
  static const TensorMapEncodeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      return static_cast<TensorMapEncodeFn>(nullptr);
    }
    return reinterpret_cast<TensorMapEncodeFn>(f);
  }();
  return fn;
}

// A bf16 tensor (d0 contiguous, d1, d2) with strides s1, s2 (elements),
// swizzled boxes of box0 x box1 x 1 (box0 = 64 elements, 128 bytes: the
// 128-byte swizzle; box0 = 32: the 64-byte one); false if the driver
// refuses it.
bool EncodeBf16Map(TensorMapEncodeFn encode, CUtensorMap* map, const void* base, int64_t d0, int64_t d1, int64_t d2,
                   int64_t s1, int64_t s2, int box0, int box1,
                   CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d0), static_cast<cuuint64_t>(d1), static_cast<cuuint64_t>(d2)};
  // d2 == 1 leaves s2 unused, but it must still be a legal stride.
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(s1) * 2,
                                 static_cast<cuuint64_t>(d2 > 1 ? s2 : s1 * d1) * 2};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box0), static_cast<cuuint32_t>(box1), 1}, estr[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, box0 == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                promo, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The entry switches of both Hopper kernels (MXVAL_WGMMA_ENTRY,
// MXVAL_RS_ENTRY): four bits read from the environment on every call, so
// one process can A/B them; `unset` when the variable is absent.
int EntryBits(const char* name, int unset) {
  const char* v = getenv(name);
  return (v != nullptr ? atoi(v) : unset) & 15;
}

// The TMA variants store through shared memory and TMA (where a staging
// area fits) unless MXVAL_WGMMA_STORE=direct (StoreTile's st.global from
// registers), a knob kept to compare the two epilogues on one build.
// MXVAL_WGMMA_RING=first | last: the x ring is filled before the weight
// panel's loads are issued (the earlier order) or after the panel is built;
// read on every call so that one process can time the orders (kernel flags
// bit 1 / bit 2).
int WtRingOrder() {
  const char* v = getenv("MXVAL_WGMMA_RING");
  if (v == nullptr) return 0;
  return strcmp(v, "first") == 0 ? 2 : strcmp(v, "last") == 0 ? 4 : 0;
}
// MXVAL_WGMMA_ENTRY (read per call, for A/Bs): the TMA kernel's entry bits
// (kernel flags bits 4-7); unset = 13 (bit 1, the ring held back behind the
// weights, measured 1.056x the time at DeepSeek-V3 V-up M = 1024: this
// kernel's panel is built in shared memory before the first MMA, so x
// stages that wait for it delay the whole tile), 0 = the entry before
// 2026-12-03.
int WtEntryFlags() { return EntryBits("MXVAL_WGMMA_ENTRY", 13) << 4; }
bool WtTmaStore() {
  const char* v = getenv("MXVAL_WGMMA_STORE");
  return v == nullptr || strcmp(v, "direct") != 0;
}

// The operand layouts both Hopper kernels need: x rows read by TMA (or
// 16-byte cp.async), w_packed in 16-byte pieces, y written in 16-byte row
// segments (TMA boxes or st.global). `name` is the kernel's, for the message.
int32_t CheckHopperLayouts(const mxval_gemm_args* a, const char* name, char* err, size_t len) {
  char msg[200];
  if (a->x_stride_k != 1 || reinterpret_cast<uintptr_t>(a->x) % 16 || a->x_stride_m % 8 || a->x_stride_b % 8) {
    snprintf(msg, sizeof(msg), "%s needs unit-stride, 16-byte aligned x rows", name);
    return SetErr(err, len, msg), 1;
  }
  if (reinterpret_cast<uintptr_t>(a->w_packed) % 16 || a->w_packed_stride_n % 16 || a->w_packed_stride_b % 16) {
    snprintf(msg, sizeof(msg), "%s needs 16-byte aligned w_packed rows", name);
    return SetErr(err, len, msg), 1;
  }
  if (a->N % 8 || reinterpret_cast<uintptr_t>(a->y) % 16 || a->y_stride_m % 8 || a->y_stride_b % 8) {
    snprintf(msg, sizeof(msg),
             "%s stores 16-byte row segments: N and the y strides must be multiples of 8, y 16-byte aligned", name);
    return SetErr(err, len, msg), 1;
  }
  return 0;
}

// One wave: as many M-tile groups per (N tile, batch) as the resident CTAs
// allow (floor, so no CTA waits for a second wave), each CTA reusing its
// dequantized weights across its group's tiles. `per_tile` CTAs (a split-K
// cluster, consecutive along x) share each (N tile, M group, batch).
int32_t OneWaveGrid(const mxval_gemm_args* a, const mxval_tile_config* c, const void* kernel, size_t smem, dim3* grid,
                    int* groups, const char* name, char* err, size_t len, int per_tile = 1) {
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, c->num_warps * 32, smem) != cudaSuccess || sms <= 0) {
    return SetErr(err, len, "cannot query the device's multiprocessor count or occupancy"), 1;
  }
  if (per_sm < 1) {
    char msg[160];
    snprintf(msg, sizeof(msg), "%s: this config cannot be resident on the device", name);
    return SetErr(err, len, msg), 1;
  }
  const int64_t ntiles = (a->N + c->block_n - 1) / c->block_n;
  const int64_t mtiles = (a->M + c->block_m - 1) / c->block_m;
  int64_t g = static_cast<int64_t>(sms) * per_sm / (ntiles * per_tile * a->B);
  if (g > mtiles) g = mtiles;
  if (g < 1) g = 1;
  if (g > 65535) g = 65535;
  *grid = dim3(static_cast<unsigned>(ntiles * per_tile), static_cast<unsigned>(g), static_cast<unsigned>(a->B));
  *groups = static_cast<int>(g);
  return 0;
}

// The L2 promotion of x's TMA loads: 256 bytes where x's rows are
// contiguous (x_stride_m == K), 128 where they are not. A strided x (K-up:
// K of every K + 64 elements of q, as in MLA) has rows that end or start
// inside a 256-byte block, so 256-byte promotion also fetches the 64 rope
// elements between rows that no CTA reads. Same-process A/B on the H200
// (BENCHMARKS.md, "L2 promotion of x's TMA loads"): 128 against 256 on
// the K-up rows 0.95-0.99 at M = 1024-8192 (GLM-5) and about 0.97 at
// M = 1024 (DeepSeek-V3), level at M = 16384; on the contiguous V-up rows level to 1.01-1.02 slower at
// M >= 8192, so they keep 256. MXVAL_TMA_X_PROMO (read per call, for
// A/Bs): none | 64 | 128 | 256 overrides it.
CUtensorMapL2promotion XPromotion(const mxval_gemm_args* a) {
  const char* v = getenv("MXVAL_TMA_X_PROMO");
  if (v == nullptr) return a->x_stride_m == a->K ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  if (strcmp(v, "none") == 0) return CU_TENSOR_MAP_L2_PROMOTION_NONE;
  if (strcmp(v, "64") == 0) return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
  if (strcmp(v, "128") == 0) return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}

// x as a 3-D tensor (K, M, B) in boxes of 64 x x_rows (rows past M read as
// zeros); y as (N, M, B) in boxes of y_cols x y_rows (stores past M or N are
// dropped by the copy engine); 128-byte swizzled (64-byte for y_cols = 32).
int32_t EncodeXYMaps(const mxval_gemm_args* a, int x_rows, int y_rows, CUtensorMap* xmap, CUtensorMap* ymap,
                     const char* name, char* err, size_t len, int y_cols = 64) {
  const TensorMapEncodeFn encode = TensorMapEncoder();
  if (encode == nullptr) return SetErr(err, len, "the driver does not provide cuTensorMapEncodeTiled"), 1;
  char msg[160];
  if (!EncodeBf16Map(encode, xmap, a->x, a->K, a->M, a->B, a->x_stride_m, a->x_stride_b, 64, x_rows, XPromotion(a))) {
    snprintf(msg, sizeof(msg), "cuTensorMapEncodeTiled refused x's layout (%s)", name);
    return SetErr(err, len, msg), 1;
  }
  if (!EncodeBf16Map(encode, ymap, a->y, a->N, a->M, a->B, a->y_stride_m, a->y_stride_b, y_cols, y_rows)) {
    snprintf(msg, sizeof(msg), "cuTensorMapEncodeTiled refused y's layout (%s)", name);
    return SetErr(err, len, msg), 1;
  }
  return 0;
}
#endif  // MXVAL_NVIDIA
}  // namespace

const mxval_tile_config* WgmmaConfigs(int32_t* n) {
#if defined(MXVAL_NVIDIA)
  *n = kNumWg + kNumWt;
  return WgConfigList();
#else
  *n = 0;
  return nullptr;
#endif
}

int32_t WgmmaCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CheckCommon(a, err, len)) return r;
  if (c == nullptr) return SetErr(err, len, "config is null"), 1;
#if !defined(MXVAL_NVIDIA)
  return SetErr(err, len, "a16wfp4_wgmma is NVIDIA sm_90a only (warpgroup MMA); use a16wfp4_tc here"), 1;
#else
  const WgEntry* e = FindEntry(kWgEntries, c);
  const WtEntry* et = FindEntry(kWtEntries, c);
  if (e == nullptr && et == nullptr) {
    return SetErr(err, len, "this config is not compiled into a16wfp4_wgmma; see the kernel's config list"), 1;
  }
  if (c->ksplit != 1) return SetErr(err, len, "a16wfp4_wgmma runs NUM_KSPLIT=1 only (each CTA keeps all of K resident)"), 1;
  if (a->K % 64 != 0) {
    return SetErr(err, len, "a16wfp4_wgmma needs K to be a multiple of 64 (its k chunk); use a16wfp4_tc for this K"), 1;
  }
  if (int32_t r = CheckHopperLayouts(a, "a16wfp4_wgmma", err, len)) return r;
  if ((a->N + c->block_n - 1) / c->block_n > 2147483647LL) return SetErr(err, len, "grid too large"), 1;
  if ((e != nullptr ? e->smem(a->K) : et->smem(a->K, 0)) > static_cast<size_t>(OptinSmem())) {
    return SetErr(err, len,
                  "a16wfp4_wgmma's weight panel (BLOCK_SIZE_N x K bf16) plus its x stages exceed the device's "
                  "shared memory per block: use a smaller BLOCK_SIZE_N or fewer stages"), 1;
  }
  return 0;
#endif
}

int32_t WgmmaRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = WgmmaCanImplement(a, c, err, len)) return r;
#if defined(MXVAL_NVIDIA)
  const WgEntry* e = FindEntry(kWgEntries, c);
  const WtEntry* et = FindEntry(kWtEntries, c);
  const GemmParams p = MakeParams(*a, 64, 1);
  // TMA stores: two staging areas per warpgroup when they fit (a tile's
  // stores overlap the next tile), else one; where not even one fits next
  // to the panel and the ring, the direct-store epilogue.
  const size_t optin = static_cast<size_t>(OptinSmem());
  const bool mx = a->activations == MXVAL_ACT_MXFP4_EVEN;
  const bool ts = et != nullptr && WtTmaStore() && et->smem(a->K, 1) <= optin;
  const int bufs = !ts ? 0 : et->smem(a->K, 2) <= optin ? 2 : 1;
  const size_t smem = e != nullptr ? e->smem(a->K) : et->smem(a->K, bufs);
  void (*kernel)(GemmParams, int) = e == nullptr ? nullptr : (mx ? e->kernel_mx : e->kernel);
  const WtKernel tkernel = et == nullptr ? nullptr : et->kernel[mx][ts];
  // Shared-memory opt-in raised once per kernel function and size.
  static thread_local size_t raised[2][2][kNumWg + kNumWt] = {};
  if (int32_t r = e != nullptr ? RaiseSmem(kernel, smem, &raised[mx][0][e - kWgEntries], err, len)
                               : RaiseSmem(tkernel, smem, &raised[mx][ts][kNumWg + (et - kWtEntries)], err, len)) {
    return r;
  }
  const int threads = c->num_warps * 32;
  dim3 grid;
  int groups = 1;
  const void* kfn = e != nullptr ? reinterpret_cast<const void*>(kernel) : reinterpret_cast<const void*>(tkernel);
  if (int32_t r = OneWaveGrid(a, c, kfn, smem, &grid, &groups, "a16wfp4_wgmma", err, len)) return r;
  if (e != nullptr) {
    kernel<<<grid, threads, smem, static_cast<cudaStream_t>(a->stream)>>>(p, groups);
  } else {
    CUtensorMap xmap, ymap;
    if (int32_t r = EncodeXYMaps(a, c->block_m, 64, &xmap, &ymap, "a16wfp4_wgmma", err, len)) return r;
    if (PdlRequested(a)) {
      // Opt-in, as for a16wfp4_decode: the contract is that the kernel
      // launched just before this one on the stream does not write
      // w_packed or w_scales.
      const cudaError_t le = LaunchWithPdl(tkernel, grid, threads, smem, a->stream, xmap, ymap, p, groups, bufs,
                                               1 | WtEntryFlags());
      if (le != cudaSuccess) return SetErr(err, len, cudaGetErrorString(le)), 1;
      return 0;
    }
    tkernel<<<grid, threads, smem, static_cast<cudaStream_t>(a->stream)>>>(xmap, ymap, p, groups, bufs,
                                                                           WtRingOrder() | WtEntryFlags());
  }
  const cudaError_t le = cudaGetLastError();
  if (le != cudaSuccess) return SetErr(err, len, cudaGetErrorString(le)), 1;
  return 0;
#else
  return 1;
#endif
}

const mxval_tile_config* WgmmaRsConfigs(int32_t* n) {
#if defined(MXVAL_NVIDIA)
  return RsConfigList(n);
#else
  *n = 0;
  return nullptr;
#endif
}

int32_t WgmmaRsCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CheckCommon(a, err, len)) return r;
  if (c == nullptr) return SetErr(err, len, "config is null"), 1;
#if !defined(MXVAL_NVIDIA)
  return SetErr(err, len, "a16wfp4_wgmma_rs is NVIDIA sm_90a only (warpgroup MMA); use a16wfp4_tc here"), 1;
#else
  bool known = false;
  const RsEntry* e = FindRs(c, a->K, &known);
  if (!known) {
    // The same tile compiled with other NUM_KSPLIT values (cluster sizes)?
    bool split[9] = {};  // NUM_KSPLIT values compiled for this tile config
    bool tile_known = false;
    for (const RsEntry& r : kRsEntries) {
      if (SameConfig(r.config, c)) tile_known = split[r.config.ksplit] = true;
    }
    if (!tile_known) {
      return SetErr(err, len, "this config is not compiled into a16wfp4_wgmma_rs; see the kernel's config list"), 1;
    }
    char msg[160];
    int off = snprintf(msg, sizeof(msg), "a16wfp4_wgmma_rs compiles this tile config with NUM_KSPLIT in {");
    for (int ks = 1, n = 0; ks <= 8; ++ks) {
      if (split[ks]) off += snprintf(msg + off, sizeof(msg) - off, "%s%d", n++ ? ", " : "", ks);
    }
    snprintf(msg + off, sizeof(msg) - off, "}, not NUM_KSPLIT=%d", c->ksplit);
    return SetErr(err, len, msg), 1;
  }
  if (e == nullptr) {
    char msg[200];
    int off = snprintf(msg, sizeof(msg),
                       "a16wfp4_wgmma_rs holds K / NUM_KSPLIT in registers: this config is compiled for K in {");
    const char* sep = "";
    for (const RsEntry& r : kRsEntries) {
      if (SameRsConfig(r.config, c) && off < static_cast<int>(sizeof(msg))) {
        off += snprintf(msg + off, sizeof(msg) - off, "%s%d", sep, r.K);
        sep = ", ";
      }
    }
    if (off < static_cast<int>(sizeof(msg))) snprintf(msg + off, sizeof(msg) - off, "}, not K = %lld", static_cast<long long>(a->K));
    return SetErr(err, len, msg), 1;
  }
  if (int32_t r = CheckHopperLayouts(a, "a16wfp4_wgmma_rs", err, len)) return r;
  if (a->M > 2147483647LL - 256) return SetErr(err, len, "M too large for the TMA coordinates (int32)"), 1;
  if ((a->N + c->block_n - 1) / c->block_n * c->ksplit > 2147483647LL) return SetErr(err, len, "grid too large"), 1;
  if (e->smem(1) > static_cast<size_t>(OptinSmem())) {
    return SetErr(err, len,
                  "a16wfp4_wgmma_rs's x stages plus its output staging exceed the device's shared memory per "
                  "block: use fewer stages"), 1;
  }
  return 0;
#endif
}

int32_t WgmmaRsRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = WgmmaRsCanImplement(a, c, err, len)) return r;
#if defined(MXVAL_NVIDIA)
  bool known = false;
  const RsEntry* e = FindRs(c, a->K, &known);
  const GemmParams p = MakeParams(*a, 64, 1);
  const bool mx = a->activations == MXVAL_ACT_MXFP4_EVEN;
  const int bufs = e->smem(2) <= static_cast<size_t>(OptinSmem()) ? 2 : 1;
  // Split-K ranks may share an SM where two CTAs fit. Forcing one per SM
  // (shared memory padded past half an SM) measured the same or slower on
  // every model shape at M <= 256 (BENCHMARKS.md, "Split-K over a cluster").
  const size_t smem = e->smem(bufs);
  const WtKernel kernel = e->kernel[mx];
  static thread_local size_t raised[2][kNumRs] = {};
  if (int32_t r = RaiseSmem(kernel, smem, &raised[mx][e - kRsEntries], err, len)) return r;
  const int threads = c->num_warps * 32;
  dim3 grid;
  int groups = 1;
  if (int32_t r = OneWaveGrid(a, c, reinterpret_cast<const void*>(kernel), smem, &grid, &groups, "a16wfp4_wgmma_rs", err,
                              len, c->ksplit)) {
    return r;
  }
  // y boxes of 64 (32 for the 32-row configs) x BLOCK_SIZE_M: one
  // warpgroup's transposed tile.
  CUtensorMap xmap, ymap;
  if (int32_t r = EncodeXYMaps(a, c->block_m, c->block_m, &xmap, &ymap, "a16wfp4_wgmma_rs", err, len,
                               c->block_n == 32 ? 32 : 64)) {
    return r;
  }
  cudaError_t le;
  const bool pdl = PdlRequested(a);  // the same opt-in contract as a16wfp4_wgmma's
  // MXVAL_RS_CLUSTER=2 (a diagnostic, read per call): NUM_KSPLIT = 1 configs
  // launched in clusters of two CTAs, which the kernel ignores, to time what
  // the cluster launch costs by itself.
  int cluster = c->ksplit;
  if (const char* v = getenv("MXVAL_RS_CLUSTER"); cluster == 1 && v != nullptr && strcmp(v, "2") == 0 && grid.x % 2 == 0) {
    cluster = 2;
  }
  int flags = pdl ? 1 : 0;
  // MXVAL_RS_ENTRY (read per call, for A/Bs): the entry bits above; unset = 15,
  // 0 = the entry before 2026-12-03.
  flags |= EntryBits("MXVAL_RS_ENTRY", 15) << 4;
  if (const char* v = getenv("MXVAL_RS_XEARLY")) flags |= (atoi(v) & 15) << 8;  // read per call, for A/Bs
  if (const char* v = getenv("MXVAL_RS_SCALES")) flags |= strcmp(v, "late") == 0 ? 1 << 16 : strcmp(v, "bytes") == 0 ? 1 << 17 : 0;
  // Where the PDL release goes (flags bit 18: none, the next kernel's CTAs
  // launch as this one's exit). By default it is dropped on two-warpgroup
  // configs holding K >= 512 with 8 or more tiles per CTA (GLM-5 V-up
  // M >= 4096); everywhere else the release stays at the last tile. Two
  // same-process A/Bs on the H200 with PDL (thirty-second session): GLM-5
  // V-up M = 4096 / 8192 / 16384 at 0.960-0.967 / 0.940-0.963 / 0.949-0.951
  // of the time with the release, but GLM-5 K-up (two warpgroups, K = 192)
  // at 1.018-1.069 slower at M = 2048-16384, so the rule is not "8+ tiles"
  // alone. MXVAL_RS_PDL (read per call, for A/Bs): release keeps the release
  // everywhere (the behaviour before), trigger-exit drops it everywhere.
  {
    const char* v = getenv("MXVAL_RS_PDL");
    const int64_t tiles_per_cta = ((a->M + c->block_m - 1) / c->block_m + groups - 1) / groups;
    const bool by_rule = c->num_warps == 12 && a->K / c->ksplit >= 512 && tiles_per_cta >= 8;
    if (v != nullptr && strcmp(v, "trigger-exit") == 0) {
      flags |= 1 << 18;
    } else if ((v == nullptr || strcmp(v, "release") != 0) && by_rule) {
      flags |= 1 << 18;
    }
  }
#if defined(MXVAL_RS_ABLATION)
  if (const char* v = getenv("MXVAL_RS_ABLATE")) flags |= (atoi(v) & 7) << 1;  // read per call
#endif
  if (pdl || cluster > 1) {
    le = LaunchEx(kernel, grid, threads, smem, a->stream, pdl, cluster, xmap, ymap, p, groups, bufs, flags);
  } else {
    kernel<<<grid, threads, smem, static_cast<cudaStream_t>(a->stream)>>>(xmap, ymap, p, groups, bufs, flags);
    le = cudaGetLastError();
  }
  if (le != cudaSuccess) return SetErr(err, len, cudaGetErrorString(le)), 1;
  return 0;
#else
  return 1;
#endif
}

// ------------------------------------------------------------------------
// gfx950's native MXFP4 MFMA ("a16wfp4_mfma_scale", mxfp4-even mode only):
// activations re-quantized per lane with the "even" rule, weights and scales
// straight from memory into v_mfma_scale_f32_16x16x128_f8f6f4, one 16 x 16
// tile per wave (kernels/gpu/mfma_scale_fp4.h has the layout). UNTESTED ON
// HARDWARE: the instruction line below is compiled for gfx950 only, which no
// compiler here targets; the lane logic around it runs on the CPU in
// mfma_scale_fp4_test.cc. A first, simple kernel: no LDS staging, each wave
// re-quantizes its own x rows (a workgroup's WN waves along N repeat that).
namespace {
// Configs: (waves along M, waves along N); BLOCK_SIZE_M = 16 WM,
// BLOCK_SIZE_N = 16 WN, BLOCK_SIZE_K = 128 (one instruction), NUM_KSPLIT = 1.
#define MXVAL_MFMA_SCALE_CONFIGS(X) \
  X(1, 1)                           \
  X(1, 4)                           \
  X(2, 2)                           \
  X(4, 4)
#if defined(MXVAL_AMD)
typedef int mxval_intx8_t __attribute__((ext_vector_type(8)));
// One v_mfma_scale_f32_16x16x128_f8f6f4: A and B as FP4 (format 4), each
// lane's scale in byte 0 of its scale operand (opsel 0).
__device__ __forceinline__ floatx4_t MfmaScaleFp4(const Fp4Lane& a, const Fp4Lane& b, floatx4_t acc) {
#if defined(__gfx950__)
  const mxval_intx8_t av = {static_cast<int>(a.codes[0]), static_cast<int>(a.codes[1]), static_cast<int>(a.codes[2]),
                            static_cast<int>(a.codes[3]), 0, 0, 0, 0};
  const mxval_intx8_t bv = {static_cast<int>(b.codes[0]), static_cast<int>(b.codes[1]), static_cast<int>(b.codes[2]),
                            static_cast<int>(b.codes[3]), 0, 0, 0, 0};
  return __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(av, bv, acc, 4, 4, 0, static_cast<int>(a.scale), 0,
                                                          static_cast<int>(b.scale));
#else
  // Other targets never launch it (MfmaScaleCanImplement checks the device).
  (void)a;
  (void)b;
  __builtin_trap();
  return acc;
#endif
}

template <int WM, int WN>
__global__ void __launch_bounds__(64 * WM * WN) A16wfp4MfmaScaleKernel(GemmParams p) {
  const int lane = static_cast<int>(threadIdx.x) % 64, wave = static_cast<int>(threadIdx.x) / 64;
  int64_t m0, n0;
  MfmaScaleWaveOrigin(WM, WN, blockIdx.x, blockIdx.y, wave, &m0, &n0);
  if (m0 >= p.M || n0 >= p.N) return;  // the whole wave: nothing to compute
  const int64_t b = blockIdx.z;
  floatx4_t acc = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t k0 = 0; k0 < p.K; k0 += kMfmaScaleK) {
    const int64_t k = k0 + MfmaScaleKOffset(lane);
    const Fp4Lane a = XLaneEven(p, b, m0 + MfmaScaleRow(lane), k);
    const Fp4Lane w = WLane(p, b, n0 + MfmaScaleRow(lane), k);
    acc = MfmaScaleFp4(a, w, acc);
  }
  const float d[4] = {acc[0], acc[1], acc[2], acc[3]};
  MfmaScaleStoreLane(p, b, m0, n0, lane, d);
}

struct MfmaScaleEntry {
  mxval_tile_config config;
  void (*kernel)(GemmParams);
};
#define MXVAL_MFMA_SCALE_ENTRY(WMW, WNW) {{16 * WMW, 16 * WNW, kMfmaScaleK, 1, 1, WMW * WNW}, A16wfp4MfmaScaleKernel<WMW, WNW>},
const MfmaScaleEntry kMfmaScaleEntries[] = {MXVAL_MFMA_SCALE_CONFIGS(MXVAL_MFMA_SCALE_ENTRY)};

#if defined(MXVAL_HIP_GFX950)
// Whether the current device is a gfx950 (its arch name, features stripped).
bool DeviceIsGfx950() {
  int dev = 0;
  hipDeviceProp_t prop;
  if (hipGetDevice(&dev) != hipSuccess || hipGetDeviceProperties(&prop, dev) != hipSuccess) return false;
  return strncmp(prop.gcnArchName, "gfx950", 6) == 0 && (prop.gcnArchName[6] == '\0' || prop.gcnArchName[6] == ':');
}
#endif  // MXVAL_HIP_GFX950
#endif
}  // namespace

const mxval_tile_config* MfmaScaleConfigs(int32_t* n) {
#if defined(MXVAL_AMD)
  return EntryConfigs(kMfmaScaleEntries, n);
#else
  *n = 0;  // AMD gfx950 only
  return nullptr;
#endif
}

int32_t MfmaScaleCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
#if defined(MXVAL_AMD)
  if (int32_t r = CheckCommon(a, err, len)) return r;
  if (c == nullptr) return SetErr(err, len, "config is null"), 1;
  if (FindEntry(kMfmaScaleEntries, c) == nullptr) {
    return SetErr(err, len, "this config is not compiled into a16wfp4_mfma_scale; see the kernel's config list"), 1;
  }
  if (c->ksplit != 1) return SetErr(err, len, "a16wfp4_mfma_scale runs NUM_KSPLIT = 1 only"), 1;
  if (a->activations != MXVAL_ACT_MXFP4_EVEN) {
    return SetErr(err, len,
                  "a16wfp4_mfma_scale runs the mxfp4-even mode only (the native MFMA takes E2M1 activations); bf16 "
                  "activations run on a16wfp4_tc"),
           1;
  }
  if (int32_t r = CheckSplit(a, c, err, len)) return r;
#if !defined(MXVAL_HIP_GFX950)
  return SetErr(err, len,
                "this library has no gfx950 code for a16wfp4_mfma_scale (build with --offload-arch=gfx950 and "
                "-DMXVAL_HIP_GFX950=1)"),
         1;
#else
  if (!DeviceIsGfx950()) return SetErr(err, len, "a16wfp4_mfma_scale needs a gfx950 device"), 1;
  return 0;
#endif
#else
  (void)a;
  (void)c;
  return SetErr(err, len, "a16wfp4_mfma_scale is AMD gfx950 only (v_mfma_scale_f32_16x16x128_f8f6f4)"), 1;
#endif
}

int32_t MfmaScaleRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = MfmaScaleCanImplement(a, c, err, len)) return r;
#if defined(MXVAL_AMD)
  const MfmaScaleEntry* e = FindEntry(kMfmaScaleEntries, c);
  const GemmParams p = MakeParams(*a, kMfmaScaleK, 1);
  const dim3 grid(static_cast<unsigned>((a->N + c->block_n - 1) / c->block_n),
                  static_cast<unsigned>((a->M + c->block_m - 1) / c->block_m), static_cast<unsigned>(a->B));
  e->kernel<<<grid, c->num_warps * kWarpSize, 0, static_cast<gpuStream_t>(a->stream)>>>(p);
  const gpuError_t le = gpuGetLastError();
  if (le != gpuSuccess) return SetErr(err, len, gpuGetErrorString(le)), 1;
  return 0;
#else
  return 1;  // not reached: CanImplement refuses
#endif
}

// ------------------------------------------------------------------------
// Device self-test of the prmt-table dequantization (a16wfp4_tile.h): for
// every scale byte s and byte b, out[(s * 256 + b) * 4 ...] holds
// DequantSelfTestWords(s, b), computed by the device's own byte permutes
// (mode 0); mode 1: DequantSelfTestWordsMul(s, b), the placement and bf16x2
// multiply of the register-sourced and decode kernels (the device's bf16
// subnormal handling included).
namespace {
#if defined(MXVAL_NVIDIA)
__global__ void DequantSelfTestKernel(uint32_t* out, int mode) {
  uint32_t* o = out + (blockIdx.x * 256 + threadIdx.x) * 4;
  if (mode == 1) {
    DequantSelfTestWordsMul(blockIdx.x, threadIdx.x, o);
  } else {
    DequantSelfTestWords(blockIdx.x, threadIdx.x, o);
  }
}
#endif
}  // namespace

int32_t DequantSelfTest(int mode, uint32_t* host_out, char* err, size_t len) {
#if defined(MXVAL_NVIDIA)
  constexpr size_t kBytes = size_t{256} * 256 * 4 * sizeof(uint32_t);
  if (mode < 0 || mode > 1) return SetErr(err, len, "self-test mode must be 0 or 1"), 1;
  uint32_t* d = nullptr;
  if (cudaMalloc(&d, kBytes) != cudaSuccess) return SetErr(err, len, "cudaMalloc failed"), 1;
  DequantSelfTestKernel<<<256, 256>>>(d, mode);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(host_out, d, kBytes, cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) return SetErr(err, len, cudaGetErrorString(e)), 1;
  return 0;
#else
  (void)mode;
  (void)host_out;
  return SetErr(err, len, "the prmt dequantization self-test is built for NVIDIA only"), 1;
#endif
}

}  // namespace gpu
}  // namespace mxval

#if defined(MXVAL_WGMMA_TRACE) && defined(MXVAL_NVIDIA)
// Copies (and then clears) the trace: `rows` x 11 u64, CTA-linear order.
extern "C" __attribute__((visibility("default"))) int32_t mxval_wgmma_trace_copy(unsigned long long* host, int32_t rows) {
  using mxval::gpu::g_wt_trace;
  constexpr int kCtas = mxval::gpu::kTraceCtas, kSlots = mxval::gpu::kTraceSlots;
  if (rows > kCtas) rows = kCtas;
  const size_t bytes = sizeof(unsigned long long) * kSlots * rows;
  if (cudaMemcpyFromSymbol(host, g_wt_trace, bytes) != cudaSuccess) return 1;
  static unsigned long long zeros[kCtas][kSlots];
  return cudaMemcpyToSymbol(g_wt_trace, zeros, sizeof(zeros)) == cudaSuccess ? 0 : 1;
}
#endif
