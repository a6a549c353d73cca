// The CPU A16WFP4 kernel exposed through the mxval kernel ABI (as kernel
// "a16wfp4_cpu" of library "mxval-builtin-cpu"): built-in kernels take the
// same path as external libraries.
#ifndef MXVAL_KERNELS_CPU_CPU_KERNEL_LIBRARY_H_
#define MXVAL_KERNELS_CPU_CPU_KERNEL_LIBRARY_H_

#include "mxval/kernel_api.h"

namespace mxval {
namespace cpu {

const mxval_kernel_library* CpuKernelLibrary();

}  // namespace cpu
}  // namespace mxval

#endif  // MXVAL_KERNELS_CPU_CPU_KERNEL_LIBRARY_H_
