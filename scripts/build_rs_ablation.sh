#!/usr/bin/env bash
# Builds the ablation variant of the CUDA kernel library: a16wfp4_wgmma_rs
# reads MXVAL_RS_ABLATE per call (a bit mask: 1 drops the MMAs, 2 the y
# stores, 4 the x copies; see MXVAL_RS_ABLATION in kernels/gpu/a16wfp4_gpu.cu)
# so that bench/probe_bounds.py --parts ablate can time each part of a call
# by itself. Never the shipped library: its outputs are wrong when a bit is set.
# Usage: scripts/build_rs_ablation.sh [OUTPUT.so]   (nvcc 13, sm_90a)
set -euo pipefail
cd "$(dirname "$0")/.."
MXVAL_VARIANT=MXVAL_RS_ABLATION exec bash scripts/build_wgmma_trace.sh \
  "${1:-build-gpu/lib/libmxval_cuda_kernels_ablation.so}"
