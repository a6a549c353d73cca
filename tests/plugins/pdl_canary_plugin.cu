// A CUDA kernel library for the mxval kernel ABI whose two kernels act on
// MXVAL_LAUNCH_PDL (programmatic dependent launch), one correctly and one
// not. It is the GPU-side canary of the PDL check: gpu_kernel_test expects
// "pdl_canary_waits" to pass and "pdl_canary_nowait" to fail when each is
// launched with PDL right behind mxval's late writer, and both to pass when
// launched plain. A check that passed the second kernel would be vacuous.
//
// The arithmetic is a naive one-thread-per-output loop in fp32 (correct on
// every shape, slow): only the launch differs between the two kernels.
//  - pdl_canary_waits reads the weights first, then executes
//    griddepcontrol.wait before it reads x or writes y (the ABI's rule).
//  - pdl_canary_nowait never waits: under PDL it reads x while the kernel
//    before it is still writing x, and its y is overwritten by that kernel.
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mxval/kernel_api.h"

namespace {

__device__ float Bf16ToFloat(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

__device__ uint16_t FloatToBf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

__device__ float E2m1(unsigned code) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (code & 8u) ? -mag[code & 7u] : mag[code & 7u];
}

__device__ float E8m0(uint8_t s) { return s == 0xFF ? __int_as_float(0x7FC00000) : ldexpf(1.0f, static_cast<int>(s) - 127); }

// One thread per y[b, m, n]; grid (ceil(N / 128), M, B).
template <bool kWait>
__global__ void CanaryKernel(mxval_gemm_args a) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, m = blockIdx.y, b = blockIdx.z;
  const bool ok = n < a.N;
  const uint8_t* wp = a.w_packed + b * a.w_packed_stride_b + n * a.w_packed_stride_n;
  const uint8_t* ws = a.w_scales + b * a.w_scales_stride_b + n * a.w_scales_stride_n;
  // The first scale byte may be read before waiting: weights are not the
  // previous kernel's output.
  const float s0 = ok ? E8m0(ws[0]) : 0.0f;
  if (kWait) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if (!ok) return;
  const uint16_t* x = static_cast<const uint16_t*>(a.x) + b * a.x_stride_b + m * a.x_stride_m;
  float acc = 0.0f;
  for (int64_t k = 0; k < a.K; ++k) {
    const unsigned code = (k & 1) ? (wp[k / 2] >> 4) : (wp[k / 2] & 15u);
    const float s = k < 32 ? s0 : E8m0(ws[k / 32]);
    acc += Bf16ToFloat(x[k * a.x_stride_k]) * E2m1(code) * s;
  }
  static_cast<uint16_t*>(a.y)[b * a.y_stride_b + m * a.y_stride_m + n] = FloatToBf16(acc);
}

int32_t SetErr(char* err, size_t len, const char* msg) {
  if (err != nullptr && len > 0) snprintf(err, len, "%s", msg);
  return 1;
}

// Any tile config is accepted and ignored (a job's dispatch table may name
// any): the launch shape is fixed.
int32_t CanImplement(const mxval_gemm_args* a, const mxval_tile_config*, char* err, size_t len) {
  if (a->activations != MXVAL_ACT_BF16) return SetErr(err, len, "bf16 activations only");
  if (a->K % 32 != 0) return SetErr(err, len, "K must be a multiple of 32");
  if (a->M > 65535 || a->B > 65535) return SetErr(err, len, "M and B must fit the grid's y and z (65535)");
  return 0;
}

size_t WorkspaceSize(const mxval_gemm_args*, const mxval_tile_config*) { return 0; }

template <bool kWait>
int32_t Run(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CanImplement(a, c, err, len)) return r;
  if (a->M == 0 || a->N == 0 || a->B == 0) return 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((a->N + 127) / 128), static_cast<unsigned>(a->M), static_cast<unsigned>(a->B));
  cfg.blockDim = dim3(128);
  cfg.stream = static_cast<cudaStream_t>(a->stream);
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (a->launch_flags & MXVAL_LAUNCH_PDL) {
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  const cudaError_t e = cudaLaunchKernelEx(&cfg, CanaryKernel<kWait>, *a);
  if (e != cudaSuccess) return SetErr(err, len, cudaGetErrorString(e));
  return 0;
}

const mxval_tile_config kConfigs[] = {{1, 128, 32, 1, 1, 4}};
const mxval_kernel kKernels[] = {
    {"pdl_canary_waits", MXVAL_DEVICE_CUDA, "sm_90a", 1u << MXVAL_ACT_BF16, kConfigs, 1, CanImplement, WorkspaceSize,
     Run<true>, MXVAL_LAUNCH_PDL},
    {"pdl_canary_nowait", MXVAL_DEVICE_CUDA, "sm_90a", 1u << MXVAL_ACT_BF16, kConfigs, 1, CanImplement, WorkspaceSize,
     Run<false>, MXVAL_LAUNCH_PDL},
};
const mxval_kernel_library kLibrary = {MXVAL_KERNEL_ABI_VERSION, "pdl-canary", "pdl-canary-1", 2, kKernels};

}  // namespace

extern "C" __attribute__((visibility("default"))) const mxval_kernel_library* mxval_get_kernel_library(void) {
  return &kLibrary;
}
