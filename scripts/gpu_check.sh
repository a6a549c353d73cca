#!/usr/bin/env bash
# Runs on the GPU machine (NVIDIA H200) from the repository root, with
# build-gpu/ staged by scripts/stage_gpu_bundle.sh: the kernel tests against
# the FP32 reference (summary table), then the side-by-side benchmark.
# Usage: scripts/gpu_check.sh [test|service|bench|all]   (results under $OUT or /tmp)
#   test     gpu_kernel_test: every kernel/config/mode vs the FP32 reference
#   service  scripts/gpu_service_check.sh: coordinator + GPU worker + a job
#   bench    bench/gpu_bench.py: side by side with cuBLAS and Triton
# GPU_TEST_FILTER (optional) is passed to gpu_kernel_test as --gtest_filter:
# the whole suite takes longer than one 600 s device call, e.g. run
# '*Decode*:*Prmt*' in one call and '-*Decode*:*Prmt*' in the next.
# PACK=1 (optional): at the end, everything under $OUT goes into one file,
# $OUT/gpu_check_<what>.tgz, and the loose files are removed. The lent
# device returns at most 8 files from $OUT, and `all` writes at least 9
# (a table run's JSON and log were lost that way on 2026-12-05).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT="${OUT:-/tmp/mxval-gpu}"
mkdir -p "$OUT"
what="${1:-all}"
export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${LD_LIBRARY_PATH:-}"
export MXVAL_CUDA_LIBRARY="$PWD/build-gpu/lib/libmxval_cuda_kernels.so"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
rc=0
if [ "$what" = test ] || [ "$what" = all ]; then
  filter=()
  [ -n "${GPU_TEST_FILTER:-}" ] && filter=("--gtest_filter=$GPU_TEST_FILTER")
  MXVAL_THREADS=16 build-gpu/bin/gpu_kernel_test --gtest_brief=1 "${filter[@]}" 2>&1 | tee "$OUT/gpu_test.log"
  rc=${PIPESTATUS[0]}
fi
if [ "$what" = service ] || [ "$what" = all ]; then
  bash scripts/gpu_service_check.sh 2>&1 | tee "$OUT/gpu_service.log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  PYTHONUNBUFFERED=1 python3 bench/gpu_bench.py --lib "$MXVAL_CUDA_LIBRARY" --out "$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
if [ "${PACK:-0}" = 1 ]; then
  pack="gpu_check_${what}.tgz"
  if (cd "$OUT" && find . -type f ! -name "$pack" -printf '%P\n' | sort | tar czf "$pack" -T - &&
      find . -type f ! -name "$pack" -delete); then
    echo "packed into $OUT/$pack: $(tar tzf "$OUT/$pack" | wc -l) files"
  else
    echo "PACK=1: packing $OUT failed; the loose files are kept"
    rc=1
  fi
fi
exit "$rc"
