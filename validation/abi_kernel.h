// Adapts a kernel reached through the mxval kernel ABI to a validation
// KernelFn (host-memory kernels: CPU built-ins and CPU plugins).
#ifndef MXVAL_VALIDATION_ABI_KERNEL_H_
#define MXVAL_VALIDATION_ABI_KERNEL_H_

#include "kernels/abi/kernel_library.h"
#include "validation/validation_case.h"

namespace mxval {

// Arguments for a case whose buffers live at the given base pointers (host
// copies, or device mirrors laid out identically).
mxval_gemm_args AbiArgsFor(const CaseData& d, const void* x_base, const uint8_t* packed_base,
                           const uint8_t* scales_base, void* y, void* workspace, size_t workspace_bytes,
                           void* stream);

// Bytes after a host kernel's workspace that must stay 0xFF.
inline constexpr size_t kWorkspaceGuardBytes = 256;

// can_implement for `config`; a refusal is FAILED_PRECONDITION "declined
// by can_implement: ..." (the kernel's reason), so it reads as the
// kernel's own decision, not as a failed run.
absl::Status CheckCanImplement(const mxval_kernel& kernel, const mxval_gemm_args& args, const TileConfig& config);
// The payload CheckCanImplement and FirstAcceptedConfig put on a refusal.
inline constexpr char kDeclinedPayload[] = "mxval.dev/declined";

// The first of the kernel's declared configs (mxval_kernel.configs) that
// its can_implement accepts for `args`: how a side runs with the
// library's own configs when no table gives it one. FAILED_PRECONDITION
// naming the last refusal when none does.
absl::StatusOr<TileConfig> FirstAcceptedConfig(const mxval_kernel& kernel, const mxval_gemm_args& args);

// A host kernel: consulted with can_implement first; its workspace poisoned (0xFF: undefined on entry) with a
// guard after it; a write into the guard is an out-of-bounds status
// (kOutOfBoundsPayload).
KernelFn HostAbiKernel(const mxval_kernel* kernel, const TileConfig& config);

}  // namespace mxval

#endif  // MXVAL_VALIDATION_ABI_KERNEL_H_
