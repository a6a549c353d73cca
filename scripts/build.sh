#!/usr/bin/env bash
# Installs dependencies (scripts/setup.sh) and builds everything into build/.
# Binaries land in build/bin/. Usage: scripts/build.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >build.cmake.log 2>&1 || { cat build.cmake.log; exit 1; }
grep -E "^-- mxval" build.cmake.log || true
cmake --build build -j "$(nproc)"
