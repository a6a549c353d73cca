#!/usr/bin/env bash
# Builds the CUDA pieces here (nvcc 13.0, sm_90a) and stages what the GPU
# machine needs into build-gpu/: the test binary, the kernel library and the
# non-system shared libraries they link (the GPU machine has no Abseil).
# The device tool carries build-gpu/ (it is git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
rm -rf build-gpu && mkdir -p build-gpu/bin build-gpu/lib
cp build/bin/gpu_kernel_test build-gpu/bin/
cp build/lib/libmxval_cuda_kernels.so build-gpu/lib/
for bin in build-gpu/bin/gpu_kernel_test build-gpu/lib/libmxval_cuda_kernels.so; do
  ldd "$bin" | awk '/=> \//{print $3}' | grep -E 'libabsl|libgtest|libnlohmann' | xargs -r -I{} cp -L {} build-gpu/lib/
done
du -sh build-gpu
