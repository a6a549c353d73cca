#include "kernels/cpu/cpu_kernel_library.h"

#include <cstdio>
#include <string>

#include "kernels/cpu/a16wfp4_cpu.h"

#ifndef MXVAL_BUILD_ID
#define MXVAL_BUILD_ID "dev"
#endif

namespace mxval {
namespace cpu {
namespace {

void SetErr(char* err, size_t len, const std::string& msg) {
  if (err != nullptr && len > 0) std::snprintf(err, len, "%s", msg.c_str());
}

CpuGemmArgs FromAbi(const mxval_gemm_args& a) {
  CpuGemmArgs c;
  c.shape = {a.B, a.M, a.N, a.K};
  c.activations = a.activations == MXVAL_ACT_MXFP4_EVEN ? ActivationMode::kMxfp4Even : ActivationMode::kBf16;
  c.x = static_cast<const uint16_t*>(a.x);
  c.xs = {a.x_stride_b, a.x_stride_m, a.x_stride_k};
  c.w = {a.w_packed, a.w_packed_stride_b, a.w_packed_stride_n, a.w_scales, a.w_scales_stride_b, a.w_scales_stride_n};
  c.y = static_cast<uint16_t*>(a.y);
  c.ys = {a.y_stride_b, a.y_stride_m};
  return c;
}

TileConfig ToConfig(const mxval_tile_config& c) {
  return TileConfig{c.block_m, c.block_n, c.block_k, c.ksplit, c.num_stages, c.num_warps};
}

int32_t CanImplementAbi(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (a == nullptr || c == nullptr) return SetErr(err, len, "args or config is null"), 1;
  if (a->activations != MXVAL_ACT_BF16 && a->activations != MXVAL_ACT_MXFP4_EVEN) {
    return SetErr(err, len, "activations must be bf16 (0) or mxfp4-even (1)"), 1;
  }
  const absl::Status st = CanImplement({a->B, a->M, a->N, a->K}, ToConfig(*c));
  if (!st.ok()) return SetErr(err, len, std::string(st.message())), 1;
  return 0;
}

size_t WorkspaceAbi(const mxval_gemm_args*, const mxval_tile_config*) { return 0; }  // allocates its own

int32_t RunAbi(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  if (int32_t r = CanImplementAbi(a, c, err, len)) return r;
  const absl::Status st = RunA16WFP4(FromAbi(*a), ToConfig(*c));
  if (!st.ok()) return SetErr(err, len, std::string(st.message())), 1;
  return 0;
}

// Representative configs (any config passing CanImplement runs).
const mxval_tile_config kConfigs[] = {
    {12, 64, 64, 1, 2, 4}, {48, 128, 64, 1, 2, 4}, {96, 128, 64, 1, 2, 4}, {6, 32, 256, 2, 2, 4},
    {24, 64, 256, 1, 2, 4}, {48, 64, 256, 1, 2, 4}, {126, 64, 128, 1, 2, 4},
};

const mxval_kernel kKernels[] = {{"a16wfp4_cpu", MXVAL_DEVICE_CPU, "cpu",
                                  (1u << MXVAL_ACT_BF16) | (1u << MXVAL_ACT_MXFP4_EVEN), kConfigs,
                                  static_cast<int32_t>(sizeof(kConfigs) / sizeof(kConfigs[0])), CanImplementAbi,
                                  WorkspaceAbi, RunAbi}};

const mxval_kernel_library kLibrary = {MXVAL_KERNEL_ABI_VERSION, "mxval-builtin-cpu", MXVAL_BUILD_ID, 1, kKernels};

}  // namespace

const mxval_kernel_library* CpuKernelLibrary() { return &kLibrary; }

}  // namespace cpu
}  // namespace mxval
