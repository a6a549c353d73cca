// Memory-traffic probes for the large-M floor (bench only, not a kernel of
// the ABI). They move exactly the bytes an A16WFP4 call must move at large M
// -- read x (B, M, K) once from DRAM, write y (B, M, N) -- with no
// arithmetic, so their time is what this GPU's memory system gives for that
// traffic mix. bench/probe_bounds.py --parts stream times them next to
// cuBLAS and a16wfp4_wgmma_rs (BENCHMARKS.md, "The large-M floor measured").
//
// mode 0 "write": y only, one warp per row, contiguous 16-byte stores.
// mode 1 "rows":  one warp per row: the row's K / 8 x chunks are loaded and
//                 its N / 8 y chunks stored (each the XOR of its lane's
//                 loads); R rows per turn, all of their loads issued before
//                 the stores.
// mode 2 "read":  mode 1's loads without the stores (x alone).
//
// (A tile-pattern mode -- 128-thread CTAs owning BLOCK_N columns, walking
// 128-row tiles -- was tried and dropped: without a copy engine and a ring
// it measured its own load latency, 2-10x slower than the rows; the
// ablation build of a16wfp4_wgmma_rs times our real traffic pattern instead.)
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kRowsPerTurn = 4;

// Volatile, and every load feeds a (predicated) store: a lane past N / 8
// still loads, so every byte of x is read.
__device__ __forceinline__ uint4 Ld16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void St16(uint8_t* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }
__device__ __forceinline__ uint4 Xor(uint4 a, uint4 b) { return make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w); }

// NC: y chunks (16 bytes) per row, 16..64; kc: x chunks per row, at most 64.
// Rows are (b, m) pairs, b-major. A lane's y chunks carry the XOR of its x
// chunks (lanes j, j + 32 of the row).
template <int NC, bool kRead, bool kWrite>
__global__ void __launch_bounds__(256) RowsKernel(const uint8_t* __restrict__ x, int64_t sxb, int64_t sxm,
                                                  uint8_t* __restrict__ y, int64_t syb, int64_t sym, int B, int M,
                                                  int kc) {
  constexpr int kPer = (NC + 31) / 32;
  const int lane = threadIdx.x % 32;
  const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int warps = gridDim.x * (blockDim.x / 32);
  const int rows = B * M;
  uint4 sink = make_uint4(0, 0, 0, 0);  // mode 2: what the loads feed, so ptxas keeps them
  for (int row0 = warp * kRowsPerTurn; row0 < rows; row0 += warps * kRowsPerTurn) {
    uint4 v[kRowsPerTurn][2];
    int64_t ybase[kRowsPerTurn];
#pragma unroll
    for (int r = 0; r < kRowsPerTurn; ++r) {
      const int row = row0 + r, b = row / M, m = row - b * M;
      ybase[r] = b * syb + m * sym;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        v[r][i] = make_uint4(row, lane, i, 0x3f80u);
        if (kRead && row < rows && lane + 32 * i < kc) v[r][i] = Ld16(x + b * sxb + m * sxm + 16 * (lane + 32 * i));
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerTurn; ++r) {
      const uint4 w = Xor(v[r][0], v[r][1]);
      sink = Xor(sink, w);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        if (kWrite && row0 + r < rows && lane + 32 * i < NC) St16(y + ybase[r] + 16 * (lane + 32 * i), w);
      }
    }
  }
  // Read-only: one store that practically never happens but that the compiler
  // cannot rule out (an unused load is deleted by ptxas, volatile or not).
  if (!kWrite && sink.x == 0x7fc00001u && sink.y == 0x7fc00003u && sink.z == 0x0badf00du) St16(y, sink);
}

template <bool kRead, bool kWrite>
cudaError_t LaunchRows(int grid, const uint8_t* x, int64_t sxb, int64_t sxm, uint8_t* y, int64_t syb, int64_t sym,
                       int B, int M, int K, int N, cudaStream_t s) {
  const int kc = K / 8;
  switch (N / 8) {
    case 16: RowsKernel<16, kRead, kWrite><<<grid, 256, 0, s>>>(x, sxb, sxm, y, syb, sym, B, M, kc); break;
    case 32: RowsKernel<32, kRead, kWrite><<<grid, 256, 0, s>>>(x, sxb, sxm, y, syb, sym, B, M, kc); break;
    case 64: RowsKernel<64, kRead, kWrite><<<grid, 256, 0, s>>>(x, sxb, sxm, y, syb, sym, B, M, kc); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

// Returns 0 on success, a cudaError_t otherwise (cudaErrorInvalidValue for a
// shape or mode the probe does not cover). Strides are in bf16 elements.
// `ctas` CTAs of 256 threads.
extern "C" __attribute__((visibility("default"))) int mxval_stream_probe(int mode, int ctas,
                                                                         const void* x, long long sxb, long long sxm,
                                                                         void* y, long long syb, long long sym, int B,
                                                                         int M, int K, int N, void* stream) {
  const auto* xb = static_cast<const uint8_t*>(x);
  auto* yb = static_cast<uint8_t*>(y);
  const auto s = static_cast<cudaStream_t>(stream);
  if (B <= 0 || M <= 0 || K % 8 || K > 512 || N % 8 || ctas <= 0 || static_cast<int64_t>(B) * M > (1 << 30)) {
    return cudaErrorInvalidValue;
  }
  sxb *= 2, sxm *= 2, syb *= 2, sym *= 2;
  if (mode == 0) return LaunchRows<false, true>(ctas, xb, sxb, sxm, yb, syb, sym, B, M, K, N, s);
  if (mode == 1) return LaunchRows<true, true>(ctas, xb, sxb, sxm, yb, syb, sym, B, M, K, N, s);
  if (mode == 2) return LaunchRows<true, false>(ctas, xb, sxb, sxm, yb, syb, sym, B, M, K, N, s);
  return cudaErrorInvalidValue;
}
