#!/usr/bin/env bash
# Builds the CUDA pieces here (nvcc 13.0, sm_90a) and stages what the GPU
# machine needs into build-gpu/: the kernel test, the mxval binary (worker
# and coordinator), the kernel library, and the non-system shared libraries
# they link (the GPU machine has no Abseil, gRPC, protobuf...), and the Python
# task child (libmxval_task.so, mxval_pyhost.py).
# The device tool carries build-gpu/ (it is git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
rm -rf build-gpu && mkdir -p build-gpu/bin build-gpu/lib
cp build/bin/gpu_kernel_test build/bin/mxval build-gpu/bin/
cp build/lib/libmxval_cuda_kernels.so build-gpu/lib/
cp build/lib/libmxval_stream_probe.so build-gpu/lib/  # bench/probe_bounds.py --parts stream
cp build/lib/libpdl_canary_plugin.so build-gpu/lib/    # gpu_kernel_test's PDL canary
cp build/lib/libmxval_task.so build/lib/mxval_pyhost.py build-gpu/lib/  # the Python task child
for bin in build-gpu/bin/* build-gpu/lib/libmxval_cuda_kernels.so build-gpu/lib/libmxval_task.so; do
  ldd "$bin" | awk '/=> \//{print $3}' |
    { grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt)\.so' || true; } | xargs -r -I{} cp -Ln {} build-gpu/lib/
done
# Debug info would push the bundle past the device tool's 64 MiB carry limit.
for f in build-gpu/bin/* build-gpu/lib/*.so*; do
  chmod u+w "$f"
  strip --strip-unneeded "$f" || echo "stage_gpu_bundle: could not strip $f" >&2
done
du -sh build-gpu
