// Does integer work issued between wgmma groups slow the tensor cores down
// when wgmma reads its A operand from registers? (BENCHMARKS.md, "32 weight
// rows per warpgroup": the pipelined first tile was 1.08-1.13x slower with a
// schedule that, in SASS, looks as intended.)
//
// One warpgroup per CTA, one CTA per SM. Each tile is the register-sourced
// kernel's MMA chain at K = 512: 8 commit groups of 4 wgmma m64n64k16, each
// group followed by wgmma.wait_group 1 and then W independent integer
// instructions (prmt / lop3 / shf chains, as in the dequantization) before
// the next group's fence. Variants: A from registers (RS) or from shared
// memory (SS), W = 0 / 40 / 80 per group, and the integer work alone; and
// the RS chain with the same integer work done by a second warpgroup of the
// CTA instead (the slower of the two warpgroups counts). Cycles per tile
// (clock64 around 64 tiles, median over CTAs) are printed.
//
// Second table: the chain alone (W = 0) with wgmma n = 32 / 64 / 128 (the x
// rows per tile, BLOCK_SIZE_M), A from registers or shared memory, over 64
// tiles (throughput) and over one tile (the latency a CTA with a single
// tile sees, as at M <= 64): whether the 32-row configs' chain at n = 32 is
// bound per instruction rather than by math (BENCHMARKS.md, thirtieth
// session).
//
// Build and run on an sm_90a machine (CMake builds it as bin/rs_overlap_probe
// where nvcc is found):
//   nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a -I. bench/rs_overlap_probe.cu -o /tmp/rs_probe
//   /tmp/rs_probe
// Operand values are arbitrary (zeros in shared memory, thread-dependent A
// registers): only the timing is of interest.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "kernels/gpu/wgmma_sm90.h"

using mxval::gpu::SmemDescSw128;
using mxval::gpu::Wgmma;
using mxval::gpu::WgmmaCommit;
using mxval::gpu::WgmmaFence;
using mxval::gpu::WgmmaRs;
using mxval::gpu::WgmmaWait;

constexpr int kTiles = 64;
constexpr int kChunks = 8;  // K = 512 in 64-k chunks
constexpr int kChunkBytes = 64 * 128;  // 64 rows x 64 bf16, 128-byte swizzled

// W instructions of independent integer work on 8 chains (no memory).
template <int W>
__device__ __forceinline__ void IntegerWork(uint32_t (&v)[8], uint32_t salt) {
#pragma unroll
  for (int i = 0; i < W / 8; ++i) {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      if (i % 3 == 0) v[c] = __byte_perm(v[c], v[(c + 1) & 7], 0x5410u + salt);
      else if (i % 3 == 1) v[c] = (v[c] & 0x77777777u) | (v[(c + 3) & 7] << 4);
      else v[c] = __funnelshift_r(v[c], v[(c + 5) & 7], 7);
    }
  }
}

// MODE 0: RS wgmma, 1: SS wgmma, 2: the integer work alone, 3: RS wgmma in
// warpgroup 0 and the integer work in warpgroup 1 (256 threads). N: wgmma's
// n (B rows per chunk; up to 128 fit the chunk stride's reads in the buffer).
// TILES: tiles timed.
template <int MODE, int W, int N = 64, int TILES = kTiles>
__global__ void __launch_bounds__(256, 1) Probe(long long* cycles, uint32_t* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem) + 1023) & ~uintptr_t{1023});
  for (int i = threadIdx.x; i < 2 * kChunks * kChunkBytes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(base)[i] = make_uint4(0, 0, 0, 0);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t b_addr = static_cast<uint32_t>(__cvta_generic_to_shared(base));
  const uint32_t a_addr = b_addr + kChunks * kChunkBytes;
  uint32_t wa[32][4];
#pragma unroll
  for (int s = 0; s < 32; ++s)
#pragma unroll
    for (int j = 0; j < 4; ++j) wa[s][j] = (threadIdx.x * 131u + s * 7u + j) & 0x3F803F80u;
  uint32_t v[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) v[c] = threadIdx.x * 0x9E3779B9u + c;
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  if (MODE == 3 && threadIdx.x >= 128) {  // warpgroup 1: the integer work only, on its own path
    const long long t0 = clock64();
    for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
      for (int c = 0; c < kChunks; ++c) IntegerWork<W>(v, static_cast<uint32_t>(c));
    const long long t1 = clock64();
    uint32_t acc = 0;
#pragma unroll
    for (int c = 0; c < 8; ++c) acc ^= v[c];
    sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
    if (threadIdx.x == 128) cycles[2 * blockIdx.x + 1] = (t1 - t0) / TILES;
    return;
  }
  constexpr bool mma = MODE != 2, work = MODE != 3;
  const long long t0 = clock64();
  for (int tile = 0; tile < TILES; ++tile) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (mma) {
        WgmmaFence();
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint64_t bd = SmemDescSw128(b_addr + c * kChunkBytes + 32 * j);
          if (MODE == 0) {
            WgmmaRs<N>::Mma(d, wa[4 * c + j], bd, 1);
          } else {
            Wgmma<N>::Mma(d, SmemDescSw128(a_addr + c * kChunkBytes + 32 * j), bd, 1);
          }
        }
        WgmmaCommit();
        WgmmaWait<1>();
      }
      if (work) IntegerWork<W>(v, static_cast<uint32_t>(c));
    }
    if (mma) WgmmaWait<0>();
  }
  const long long t1 = clock64();
  uint32_t acc = 0;
#pragma unroll
  for (int c = 0; c < 8; ++c) acc ^= v[c];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc ^= __float_as_uint(d[i]);
  sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  if (threadIdx.x % 128 == 0) cycles[2 * blockIdx.x + threadIdx.x / 128] = (t1 - t0) / TILES;
}

template <int MODE, int W, int N = 64, int TILES = kTiles>
double Run(int sms) {
  long long* cycles;
  uint32_t* sink;
  const int threads = MODE == 3 ? 256 : 128;
  cudaMalloc(&cycles, 2 * sms * sizeof(long long));
  cudaMemset(cycles, 0, 2 * sms * sizeof(long long));
  cudaMalloc(&sink, sms * 256 * sizeof(uint32_t));
  const int smem = 2 * kChunks * kChunkBytes + 1024;
  cudaFuncSetAttribute(Probe<MODE, W, N, TILES>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  std::vector<long long> h(2 * sms), slowest(sms);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    Probe<MODE, W, N, TILES><<<sms, threads, smem>>>(cycles, sink);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      printf("launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
      return -1;
    }
    cudaMemcpy(h.data(), cycles, 2 * sms * sizeof(long long), cudaMemcpyDeviceToHost);
    for (int i = 0; i < sms; ++i) slowest[i] = std::max(h[2 * i], h[2 * i + 1]);
    std::sort(slowest.begin(), slowest.end());
    best = std::min(best, static_cast<double>(slowest[sms / 2]));
  }
  cudaFree(cycles);
  cudaFree(sink);
  return best;
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("cycles per tile (8 groups of 4 wgmma m64n64k16, K = 512), median over %d CTAs, best of 5\n", sms);
  printf("%-28s %8s %8s %8s\n", "", "W=0", "W=40", "W=80");
  printf("%-28s %8.0f %8.0f %8.0f\n", "A from registers (RS)", Run<0, 0>(sms), Run<0, 40>(sms), Run<0, 80>(sms));
  printf("%-28s %8.0f %8.0f %8.0f\n", "A from shared memory (SS)", Run<1, 0>(sms), Run<1, 40>(sms), Run<1, 80>(sms));
  printf("%-28s %8.0f %8.0f %8.0f\n", "integer work alone", Run<2, 0>(sms), Run<2, 40>(sms), Run<2, 80>(sms));
  printf("%-28s %8.0f %8.0f %8.0f\n", "RS, work in another WG", Run<3, 0>(sms), Run<3, 40>(sms), Run<3, 80>(sms));
  printf("\nthe chain alone (32 wgmma m64nNk16 per tile), cycles per tile, median over %d CTAs, best of 5\n", sms);
  printf("%-28s %8s %8s %8s\n", "", "n=32", "n=64", "n=128");
  printf("%-28s %8d %8d %8d\n", "dense bf16 math, 4096 flop/clk", 512, 1024, 2048);
  printf("%-28s %8.0f %8.0f %8.0f\n", "RS, 64 tiles", Run<0, 0, 32>(sms), Run<0, 0, 64>(sms), Run<0, 0, 128>(sms));
  printf("%-28s %8.0f %8.0f %8.0f\n", "SS, 64 tiles", Run<1, 0, 32>(sms), Run<1, 0, 64>(sms), Run<1, 0, 128>(sms));
  printf("%-28s %8.0f %8.0f %8.0f\n", "RS, one tile", Run<0, 0, 32, 1>(sms), Run<0, 0, 64, 1>(sms), Run<0, 0, 128, 1>(sms));
  printf("%-28s %8.0f %8.0f %8.0f\n", "SS, one tile", Run<1, 0, 32, 1>(sms), Run<1, 0, 64, 1>(sms), Run<1, 0, 128, 1>(sms));
  return 0;
}
