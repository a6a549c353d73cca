#!/usr/bin/env bash
# The main job: set up, build, and run the local validation sweep of the CPU
# A16WFP4 kernel against the FP32 reference on the GLM-5 TP4 shapes.
# Extra arguments go to `mxval run` (see build/bin/mxval run --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
exec build/bin/mxval run "$@"
