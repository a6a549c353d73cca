#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with build-gpu/ staged by
# scripts/stage_gpu_bundle.sh: a worker whose cuBLAS crashes. A stand-in
# libcublas.so.13 (tests/plugins/fake_cublas_crash.c, built here with cc)
# segfaults when the roofline makes its handle, so every task's child dies
# after it wrote its checked and timed result. The job must still finish
# with every task passed (not infrastructure failures) and the report must
# list each task's roofline as not measured, with the signal.
# Writes the reports under $OUT (default /tmp/mxval-gpu) with TAG _roofline_crash.
set -uo pipefail
cd "$(dirname "$0")/.."
fake=$(mktemp -d)
cc -shared -fPIC -o "$fake/libcublas.so.13" tests/plugins/fake_cublas_crash.c || exit 1
export LD_LIBRARY_PATH="$fake:${LD_LIBRARY_PATH:-}"
OUT="${OUT:-/tmp/mxval-gpu}"
mkdir -p "$OUT"
OUT="$OUT" BASELINE_TABLE=kernels/configs/sm_90a.json PRESETS=dsv3-tp8 M_VALUES=64,4096 TAG=_roofline_crash \
  bash scripts/gpu_service_check.sh >"$OUT/gpu_roofline_crash_check.log" 2>&1
rc=$?
md="$OUT/h200_service_job_roofline_crash.md"
passed=$(grep -c '| pass | pass |' "$md" 2>/dev/null)
noted=$(grep -c "Not measured on 4 tasks .*ended while measuring the device's roofline (killed by signal 11" "$md" 2>/dev/null)
echo "job exit $rc; tasks passed ${passed:-0} of 4; roofline noted as interrupted: ${noted:-0}"
[ "$rc" -eq 0 ] && [ "${passed:-0}" -eq 4 ] && [ "${noted:-0}" -eq 1 ] && echo "roofline crash check: OK" && exit 0
echo "roofline crash check: FAILED (log: $OUT/gpu_roofline_crash_check.log)"
exit 1
