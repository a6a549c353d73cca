// The "late writer": the kernel mxval runs right before a kernel under test
// launched with programmatic dependent launch (MXVAL_LAUNCH_PDL).
//
// It lets its dependents start at once (griddepcontrol.launch_dependents),
// then spins for delay_ns on the global timer, then makes two copies: first
// (mxval: the poisoned y over y) and second (the task's real x over a
// poisoned x). A dependent that reads x before its griddepcontrol.wait
// computes with poison; what it wrote to y before the wait is poisoned
// again and checked as unwritten. stamps (optional): CTA 0 stores the
// global timer when it starts and when its copies are done, so a test can
// see the overlap.
//
// This file is the source of late_writer_ptx.h (PTX, loaded with
// cuModuleLoadData by cuda_runtime.cc, so the worker itself needs no CUDA
// toolkit); regenerate it with kernels/runtime/gen_late_writer_ptx.sh.
#include <stdint.h>

__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void CopyBytes(uint8_t* dst, const uint8_t* src, uint64_t bytes) {
  // Allocations are 256-byte aligned: 16-byte chunks, then a byte tail.
  const uint64_t n16 = bytes / 16;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (uint64_t i = tid; i < n16; i += stride) reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  for (uint64_t i = n16 * 16 + tid; i < bytes; i += stride) dst[i] = src[i];
}

extern "C" __global__ void mxval_late_writer(uint8_t* first_dst, const uint8_t* first_src, uint64_t first_bytes,
                                             uint8_t* second_dst, const uint8_t* second_src, uint64_t second_bytes,
                                             uint64_t delay_ns, uint64_t* stamps) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const uint64_t t0 = GlobalTimer();
  if (stamps != nullptr && blockIdx.x == 0 && threadIdx.x == 0) stamps[0] = t0;
  while (GlobalTimer() - t0 < delay_ns) {
  }
  CopyBytes(first_dst, first_src, first_bytes);
  CopyBytes(second_dst, second_src, second_bytes);
  if (stamps != nullptr && blockIdx.x == 0) {
    __syncthreads();
    if (threadIdx.x == 0) stamps[1] = GlobalTimer();
  }
}
