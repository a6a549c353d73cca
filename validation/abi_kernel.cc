#include "validation/abi_kernel.h"

#include <memory>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace mxval {

mxval_gemm_args AbiArgsFor(const CaseData& d, const void* x_base, const uint8_t* packed_base,
                           const uint8_t* scales_base, void* y, void* workspace, size_t workspace_bytes,
                           void* stream) {
  const GemmShape& s = d.spec.shape;
  mxval_gemm_args a{};
  a.B = s.B;
  a.M = s.M;
  a.N = s.N;
  a.K = s.K;
  a.activations = d.spec.activations == ActivationMode::kMxfp4Even ? MXVAL_ACT_MXFP4_EVEN : MXVAL_ACT_BF16;
  a.x = x_base;
  a.x_stride_b = d.xs.b;
  a.x_stride_m = d.xs.m;
  a.x_stride_k = d.xs.k;
  a.w_packed = packed_base;
  a.w_packed_stride_b = d.w.packed_stride_b;
  a.w_packed_stride_n = d.w.packed_stride_n;
  a.w_scales = scales_base;
  a.w_scales_stride_b = d.w.scale_stride_b;
  a.w_scales_stride_n = d.w.scale_stride_n;
  a.y = y;
  a.y_stride_b = d.ys.b;
  a.y_stride_m = d.ys.m;
  a.workspace = workspace;
  a.workspace_bytes = workspace_bytes;
  a.stream = stream;
  return a;
}

absl::Status CheckCanImplement(const mxval_kernel& kernel, const mxval_gemm_args& args, const TileConfig& config) {
  absl::Status st = CanImplement(kernel, args, config);
  if (st.ok()) return st;
  // A Python kernel's can_implement that raised (mxval_pyhost.py says so)
  // made no decision: an error like any other, not a refusal.
  if (absl::StrContains(st.message(), ": can_implement raised ")) return st;
  absl::Status declined = absl::FailedPreconditionError(absl::StrCat("declined by can_implement: ", st.message()));
  declined.SetPayload(kDeclinedPayload, absl::Cord("can_implement"));
  return declined;
}

absl::StatusOr<TileConfig> FirstAcceptedConfig(const mxval_kernel& kernel, const mxval_gemm_args& args) {
  if (kernel.configs == nullptr || kernel.num_configs <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kernel.name, " declares no configs and no table gave one for this case"));
  }
  absl::Status last;
  for (int32_t i = 0; i < kernel.num_configs && i < 4096; ++i) {
    const TileConfig c = FromAbi(kernel.configs[i]);
    // Asked as the run will be: with a workspace of the size it wants
    // (can_implement only looks at the pointer and the size).
    mxval_gemm_args a = args;
    a.workspace_bytes = WorkspaceSize(kernel, a, c);
    alignas(256) static uint8_t no_workspace[8];
    a.workspace = a.workspace_bytes > 0 ? no_workspace : nullptr;
    last = CanImplement(kernel, a, c);
    if (last.ok()) return c;
    if (absl::StrContains(last.message(), ": can_implement raised ")) return last;
  }
  absl::Status st = absl::FailedPreconditionError(
      absl::StrCat("declined by can_implement: none of the ", kernel.num_configs, " configs ", kernel.name,
                   " declares accepts this case (the last: ", last.message(), ")"));
  st.SetPayload(kDeclinedPayload, absl::Cord("configs"));
  return st;
}

KernelFn HostAbiKernel(const mxval_kernel* kernel, const TileConfig& config) {
  // can_implement is asked on the first call only (the timed repetitions
  // that follow run the same arguments).
  auto asked = std::make_shared<bool>(false);
  return [kernel, config, asked](const CaseData& d, uint16_t* y) -> absl::Status {
    mxval_gemm_args probe = AbiArgsFor(d, d.x_bf16.data(), d.packed.data(), d.scales.data(), y, nullptr, 0, nullptr);
    const size_t bytes = WorkspaceSize(*kernel, probe, config);
    // Undefined on entry: 0xFF bytes (NaN as fp32) like the device path; a
    // guard after it, checked after the run.
    std::vector<uint8_t> ws(bytes + kWorkspaceGuardBytes, 0xFF);
    mxval_gemm_args a =
        AbiArgsFor(d, d.x_bf16.data(), d.packed.data(), d.scales.data(), y, bytes ? ws.data() : nullptr, bytes, nullptr);
    if (!*asked) {
      MXVAL_RETURN_IF_ERROR(CheckCanImplement(*kernel, a, config));  // with the arguments run() gets
      *asked = true;
    }
    MXVAL_RETURN_IF_ERROR(Run(*kernel, a, config));
    size_t changed = 0, farthest = 0;
    for (size_t i = 0; i < kWorkspaceGuardBytes; ++i) {
      if (ws[bytes + i] != 0xFF) ++changed, farthest = i + 1;
    }
    if (changed == 0) return absl::OkStatus();
    absl::Status st = absl::OutOfRangeError(absl::StrCat("wrote past the end of its ", bytes, "-byte workspace: ",
                                                         changed, " byte(s), the farthest ", farthest, " past the end"));
    st.SetPayload(kOutOfBoundsPayload, absl::Cord("workspace"));
    return st;
  };
}

}  // namespace mxval
