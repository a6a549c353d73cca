#!/usr/bin/env bash
# Builds the profiling variant of the CUDA kernel library: a16wfp4_wgmma's
# TMA-fed kernel and a16wfp4_wgmma_rs record a per-CTA timeline
# (MXVAL_WGMMA_TRACE, see kernels/gpu/a16wfp4_gpu.cu) that
# bench/wgmma_trace.py prints (--kernel picks which). Never the shipped
# library: the marks cost registers and stores.
# Usage: scripts/build_wgmma_trace.sh [OUTPUT.so]   (nvcc 13, sm_90a)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build-gpu/lib/libmxval_cuda_kernels_trace.so}"
mkdir -p "$(dirname "$out")"
NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
# MXVAL_VARIANT picks another experiment switch (scripts/build_rs_ablation.sh).
variant="${MXVAL_VARIANT:-MXVAL_WGMMA_TRACE}"
"$NVCC" -std=c++17 -O3 -D"$variant" -DMXVAL_BUILD_ID="\"$variant\"" \
  -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo \
  -Xcompiler=-fPIC,-fvisibility=hidden -shared -cudart static -I. -Ikernels/include \
  kernels/gpu/a16wfp4_gpu.cu kernels/gpu/kernel_library.cu -o "$out"
echo "built $out"
