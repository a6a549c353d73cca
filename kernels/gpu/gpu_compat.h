// One source for CUDA (nvcc) and HIP (hipcc): runtime names and qualifiers.
//
//   MXVAL_NVIDIA  compiling CUDA (host or device pass)
//   MXVAL_AMD     compiling HIP for AMD
//   MXVAL_HD      __host__ __device__ in GPU compilers, plain inline on CPU
//                 (the shared tile phases are also built into CPU unit tests)
#ifndef MXVAL_KERNELS_GPU_GPU_COMPAT_H_
#define MXVAL_KERNELS_GPU_GPU_COMPAT_H_

#include "kernels/mxfp4/mxfp4.h"  // MXVAL_HD

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define MXVAL_AMD 1
#define gpuStream_t hipStream_t
#define gpuError_t hipError_t
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuFuncSetAttribute(f, a, v) hipFuncSetAttribute(reinterpret_cast<const void*>(f), a, v)
#define gpuFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define gpuGetDevice hipGetDevice
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#define MXVAL_NVIDIA 1
#define gpuStream_t cudaStream_t
#define gpuError_t cudaError_t
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuFuncSetAttribute cudaFuncSetAttribute
#define gpuFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define gpuGetDevice cudaGetDevice
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDevAttrMaxSharedMemoryPerBlockOptin cudaDevAttrMaxSharedMemoryPerBlockOptin
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#endif

#endif  // MXVAL_KERNELS_GPU_GPU_COMPAT_H_
