// Exports the built-in GPU kernels through the mxval kernel ABI.
#include "kernels/gpu/a16wfp4_gpu.h"
#include "mxval/kernel_api.h"

#ifndef MXVAL_BUILD_ID
#define MXVAL_BUILD_ID "dev"
#endif

namespace {

#if defined(__HIPCC__)
constexpr int32_t kDevice = MXVAL_DEVICE_HIP;
// The archs the build's code objects target: the build sets MXVAL_HIP_ARCHS to
// its --offload-arch list (deploy/docker/Dockerfile.rocm: "gfx942,gfx950");
// the default is the CI compile check's.
#ifdef MXVAL_HIP_ARCHS
constexpr const char* kArchs = MXVAL_HIP_ARCHS;
#else
constexpr const char* kArchs = "gfx90a,gfx940";
#endif
constexpr const char* kLibraryName = "mxval-builtin-hip";
constexpr uint32_t kPdl = 0;  // no programmatic dependent launch under HIP
#else
constexpr int32_t kDevice = MXVAL_DEVICE_CUDA;
constexpr const char* kArchs = "sm_90a";
constexpr const char* kLibraryName = "mxval-builtin-cuda";
// a16wfp4_decode, a16wfp4_wgmma (its TMA-fed variants) and a16wfp4_wgmma_rs
// launch with programmatic dependent launch when args allow it.
constexpr uint32_t kPdl = MXVAL_LAUNCH_PDL;
#endif

size_t Workspace(const mxval_gemm_args* a, const mxval_tile_config* c) { return mxval::gpu::WorkspaceSize(a, c); }

const mxval_kernel_library* Build() {
  static mxval_kernel kernels[7];
  int32_t n_tc = 0, n_simt = 0, n_panel = 0, n_decode = 0, n_wg = 0, n_rs = 0, n_ms = 0;
  const mxval_tile_config* tc = mxval::gpu::TcConfigs(&n_tc);
  const mxval_tile_config* panel = mxval::gpu::PanelConfigs(&n_panel);
  const mxval_tile_config* simt = mxval::gpu::SimtConfigs(&n_simt);
  const mxval_tile_config* decode = mxval::gpu::DecodeConfigs(&n_decode);
  const mxval_tile_config* wg = mxval::gpu::WgmmaConfigs(&n_wg);
  const mxval_tile_config* rs = mxval::gpu::WgmmaRsConfigs(&n_rs);
  const mxval_tile_config* ms = mxval::gpu::MfmaScaleConfigs(&n_ms);
  const uint32_t modes = (1u << MXVAL_ACT_BF16) | (1u << MXVAL_ACT_MXFP4_EVEN);
  kernels[0] = {"a16wfp4_tc", kDevice, kArchs, modes, tc, n_tc, mxval::gpu::TcCanImplement, Workspace,
                mxval::gpu::TcRun, 0u};
  kernels[1] = {"a16wfp4_simt", kDevice, kArchs, modes, simt, n_simt, mxval::gpu::SimtCanImplement, Workspace,
                mxval::gpu::SimtRun, 0u};
  kernels[2] = {"a16wfp4_tc_panel", kDevice, kArchs, modes, panel, n_panel, mxval::gpu::PanelCanImplement, Workspace,
                mxval::gpu::PanelRun, 0u};
  kernels[3] = {"a16wfp4_decode", kDevice, kArchs, modes, decode, n_decode, mxval::gpu::DecodeCanImplement, Workspace,
                mxval::gpu::DecodeRun, kPdl};
  int32_t count = 4;
  // The Hopper kernels exist in the CUDA build only (no configs under HIP).
  if (n_wg > 0) {
    kernels[count++] = {"a16wfp4_wgmma", kDevice, kArchs, modes, wg, n_wg, mxval::gpu::WgmmaCanImplement, Workspace,
                        mxval::gpu::WgmmaRun, kPdl};
  }
  if (n_rs > 0) {
    kernels[count++] = {"a16wfp4_wgmma_rs", kDevice, kArchs, modes, rs, n_rs, mxval::gpu::WgmmaRsCanImplement,
                        Workspace, mxval::gpu::WgmmaRsRun, kPdl};
  }
  // gfx950's native MXFP4 MFMA: the HIP build only, mxfp4-even only, and
  // untested on hardware (kernels/gpu/mfma_scale_fp4.h).
  if (n_ms > 0) {
    kernels[count++] = {"a16wfp4_mfma_scale", kDevice, "gfx950", 1u << MXVAL_ACT_MXFP4_EVEN, ms, n_ms,
                        mxval::gpu::MfmaScaleCanImplement, Workspace, mxval::gpu::MfmaScaleRun, 0u};
  }
  static const mxval_kernel_library lib = {MXVAL_KERNEL_ABI_VERSION, kLibraryName, MXVAL_BUILD_ID, count, kernels};
  return &lib;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const mxval_kernel_library* mxval_get_kernel_library(void) {
  static const mxval_kernel_library* lib = Build();
  return lib;
}

// Not part of the kernel ABI table: a self-test of the device's MXFP4
// dequantization (gpu_kernel_test checks it against the format library for
// every scale byte and byte value). Mode 0: the prmt tables (the wgmma
// panel); 1: the placement and bf16x2 multiply of the register-sourced and
// decode kernels (E2M1x8ViaMul). Returns 0 on success.
extern "C" __attribute__((visibility("default"))) int32_t mxval_dequant_selftest_mode(int32_t mode, uint32_t* host_out,
                                                                                      char* err, size_t len) {
  return mxval::gpu::DequantSelfTest(mode, host_out, err, len);
}
