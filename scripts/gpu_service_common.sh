# Sourced (from the repository root) by the GPU-machine service scripts
# (gpu_service_check.sh, gpu_pdl_canary_job.sh): the staged bundle's
# environment, a scratch directory, and a coordinator on loopback.
# Sets OUT, TAG, BIN (MXVAL_BIN if set) and work; start_coordinator sets spid and addr; the
# caller starts its worker and sets wpid. Both are stopped at exit.
OUT="${OUT:-/tmp/mxval-gpu}"
TAG="${TAG:-}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${LD_LIBRARY_PATH:-}"
BIN="${MXVAL_BIN:-build-gpu/bin/mxval}"  # MXVAL_BIN: another build of the CLI, e.g. for an A/B of the worker
work=$(mktemp -d)
wpid="" spid=""
cleanup() { kill $wpid $spid 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

start_coordinator() {
  "$BIN" serve --listen 127.0.0.1:0 --db "$work/mxval.db" >"$work/serve.out" 2>"$work/serve.err" &
  spid=$!
  for _ in $(seq 100); do grep -q "listening on" "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
  addr=$(awk '/listening on/{print $3}' "$work/serve.out")
  [ -n "$addr" ] || { echo "coordinator did not start"; cat "$work/serve.err"; exit 1; }
}
