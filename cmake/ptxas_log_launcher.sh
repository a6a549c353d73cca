#!/usr/bin/env bash
# CUDA compiler launcher (CMake's CUDA_COMPILER_LAUNCHER) for sources built
# with --resource-usage: runs the compiler command given as arguments 2..,
# keeps its whole stderr in LOGDIR/<source file name>.log (argument 1, the
# file named after the argument that follows -c), and passes on to stderr
# only what is not ptxas's per-function resource report, so the build log
# stays readable while kernels/gpu/spill_check.py reads the report.
# Exits with the compiler's status.
set -uo pipefail
logdir=$1
shift
src=unknown.cu
prev=
for a in "$@"; do
  [ "$prev" = -c ] && src=$a
  prev=$a
done
mkdir -p "$logdir"
log="$logdir/$(basename "$src").log"
"$@" 2>"$log.tmp"
rc=$?
mv -f "$log.tmp" "$log"
grep -v -E '^ptxas info +:|^ +[0-9]+ bytes stack frame' "$log" >&2
exit $rc
