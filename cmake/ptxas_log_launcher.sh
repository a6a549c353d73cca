#!/usr/bin/env bash
# CUDA compiler launcher (CMake's CUDA_COMPILER_LAUNCHER) for sources built
# with --resource-usage: runs the compiler command given as arguments 2..,
# keeps its whole stderr in LOGDIR/<source file name>.log (argument 1, the
# file named after the argument that follows -c), and passes on to stderr
# all but ptxas's routine per-function resource lines, so the build log
# stays readable while kernels/gpu/spill_check.py reads the report. ptxas's
# coded advisories ("ptxas info : (C7510) Potential Performance Loss: ...")
# still reach the build log.
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
grep -v -E '^ptxas info +: [^(]|^ +[0-9]+ bytes stack frame' "$log" >&2
exit $rc
