#!/usr/bin/env bash
# The main job: set up, build, and run the embedded single-machine service
# (`mxval demo`): a coordinator and local CPU workers on a SQLite file run the
# GLM-5 TP4 sweep of an untuned baseline table vs the tuned one and print the
# report. Extra arguments go to `mxval demo` (see build/bin/mxval demo --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
exec build/bin/mxval demo --db "${MXVAL_DEMO_DB:-build/mxval-demo.db}" "$@"
