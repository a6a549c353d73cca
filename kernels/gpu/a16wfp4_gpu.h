// Entry points of the GPU A16WFP4 kernels, in mxval kernel-ABI form
// (kernels/include/mxval/kernel_api.h). kernel_library.cu collects them into
// the exported library table.
#ifndef MXVAL_KERNELS_GPU_A16WFP4_GPU_H_
#define MXVAL_KERNELS_GPU_A16WFP4_GPU_H_

#include "mxval/kernel_api.h"

namespace mxval {
namespace gpu {

// Tensor-core kernel ("a16wfp4_tc"): mma.sync (NVIDIA) / MFMA (AMD).
const mxval_tile_config* TcConfigs(int32_t* n);
int32_t TcCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);
int32_t TcRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);

// Panel kernel ("a16wfp4_tc_panel"): dequantized weight panel kept in smem
// and reused across many M tiles per CTA (large M).
const mxval_tile_config* PanelConfigs(int32_t* n);
int32_t PanelCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);
int32_t PanelRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);

// Portable SIMT fallback ("a16wfp4_simt"): any strides.
const mxval_tile_config* SimtConfigs(int32_t* n);
int32_t SimtCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);
int32_t SimtRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);

// Decode kernel ("a16wfp4_decode", NVIDIA): small M, one CTA per
// (BLOCK_SIZE_M-row tile, columns, batch), one pass over the weights per
// row tile, K in {128, 192, 256, 512}.
const mxval_tile_config* DecodeConfigs(int32_t* n);
int32_t DecodeCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);
int32_t DecodeRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);

// Hopper kernel ("a16wfp4_wgmma", NVIDIA sm_90a): warpgroup MMA against a
// weight panel dequantized once per CTA into swizzled shared memory, x
// streamed through a cp.async ring; K a multiple of 64, NUM_KSPLIT = 1.
const mxval_tile_config* WgmmaConfigs(int32_t* n);
int32_t WgmmaCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);
int32_t WgmmaRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);

// Hopper kernel with register-sourced weights ("a16wfp4_wgmma_rs", NVIDIA
// sm_90a): y^T = w x^T, each consumer warpgroup's 64 weight rows dequantized
// once into wgmma A fragments in registers, x the shared-memory B operand
// through a TMA ring; K in the configs' compiled set, NUM_KSPLIT = 1.
const mxval_tile_config* WgmmaRsConfigs(int32_t* n);
int32_t WgmmaRsCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);
int32_t WgmmaRsRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);

// gfx950's native MXFP4 MFMA ("a16wfp4_mfma_scale", AMD gfx950 only,
// mxfp4-even mode only): v_mfma_scale_f32_16x16x128_f8f6f4 on FP4 x FP4,
// activations re-quantized per lane (kernels/gpu/mfma_scale_fp4.h).
// Untested on hardware; no configs outside the HIP build.
const mxval_tile_config* MfmaScaleConfigs(int32_t* n);
int32_t MfmaScaleCanImplement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);
int32_t MfmaScaleRun(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len);

// Runs the prmt dequantization (a16wfp4_tile.h) on the device for every
// (scale byte, byte) pair: host_out gets 256 * 256 * 4 words (see the
// definition).
int32_t DequantSelfTest(int mode, uint32_t* host_out, char* err, size_t len);

// Bytes of FP32 split-K partials a config needs (0 when NUM_KSPLIT == 1).
size_t WorkspaceSize(const mxval_gemm_args* a, const mxval_tile_config* c);

}  // namespace gpu
}  // namespace mxval

#endif  // MXVAL_KERNELS_GPU_A16WFP4_GPU_H_
