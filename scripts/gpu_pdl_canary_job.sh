#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with build-gpu/ staged by
# scripts/stage_gpu_bundle.sh: the service's PDL check end to end on a real
# GPU, with the canary library (tests/plugins/pdl_canary_plugin.cu). A
# coordinator, one worker daemon on the CUDA devices, the canary registered as
# an external library, and two plain-vs-PDL jobs (submit --launch plain
# --candidate-launch pdl), each with the same kernel on both sides:
#   pdl_canary_waits   waits before reading x: every task must PASS;
#   pdl_canary_nowait  never waits: every candidate must fail behind the late
#                      writer, and triage must say PR_TOUCHED because of the
#                      launch (launch_differs), not UNTOUCHED_FAILURE.
# Exit 0 only when both hold. Writes both jobs' Markdown reports.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_service_common.sh
mkdir -p "$work/kernels"
cp build-gpu/lib/libpdl_canary_plugin.so "$work/kernels/"
start_coordinator
"$BIN" worker --coordinator "$addr" --devices cuda --kernel-dir "$work/kernels" 2>"$work/worker.err" &
wpid=$!
"$BIN" register-library --coordinator "$addr" --file "$work/kernels/libpdl_canary_plugin.so" || exit 1

fail=0
for kernel in pdl_canary_waits pdl_canary_nowait; do
  cat >"$work/$kernel.json" <<EOF
{"name": "h200 PDL canary: $kernel, plain vs PDL", "presets": ["glm5-tp4", "dsv3-tp8"], "mValues": [1, 7, 64],
 "targetArchs": ["sm_90a"],
 "repetitions": 3,
 "baselineKernel": {"library": "pdl_canary_plugin", "kernel": "$kernel", "buildId": "pdl-canary-1"},
 "candidateKernel": {"library": "pdl_canary_plugin", "kernel": "$kernel", "buildId": "pdl-canary-1"}}
EOF
  "$BIN" submit --coordinator "$addr" --spec "$work/$kernel.json" --request-id "canary-$kernel" --launch plain \
    --candidate-launch pdl --wait --format json --out "$work/$kernel.out.json" --timeout 120
  rc=$?
  job=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobId"])' "$work/$kernel.out.json")
  "$BIN" get --coordinator "$addr" --job "$job" --format markdown --out "$OUT/h200_pdl_canary_${kernel}${TAG}.md"
  python3 - "$work/$kernel.out.json" "$kernel" "$rc" <<'PY' || fail=1
import json, sys
job, kernel, rc = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
results = job.get("results", [])
bad = []
for r in results:
    t = r.get("triage", {})
    cls, cand, base = t.get("triageClass"), r["candidate"], r["baseline"]
    row = "%s N=%s K=%s M=%s: %s, baseline %s (%s), candidate %s (%s)" % (
        r["shape"].get("op"), r["shape"].get("n"), r["shape"].get("k"), r.get("m"), cls, base["accuracy"]["verdict"], base.get("launch"),
        cand["accuracy"]["verdict"], cand.get("launch"))
    print(row)
    if cand.get("launch") != "LAUNCH_MODE_PDL" or base.get("launch") != "LAUNCH_MODE_PLAIN":
        bad.append("launch not recorded as plain / PDL: " + row)
    if kernel == "pdl_canary_waits":
        if cls != "TRIAGE_CLASS_PASS":
            bad.append("the waiting kernel must pass: " + row)
    elif cls != "TRIAGE_CLASS_PR_TOUCHED" or not t.get("launchDiffers") or \
            not any(e.startswith("launch differs: baseline plain, candidate PDL") for e in t.get("evidence", [])):
        bad.append("the non-waiting kernel must be PR_TOUCHED by its launch: " + row)
want_rc = 0 if kernel == "pdl_canary_waits" else 1
if rc != want_rc:
    bad.append("submit --wait exited %d, expected %d" % (rc, want_rc))
if len(results) < 6:
    bad.append("only %d tasks" % len(results))
print("%s: %d tasks, %s" % (kernel, len(results), "as expected" if not bad else "NOT as expected"))
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
done
echo "--- worker stderr"; tail -5 "$work/worker.err"
kill -TERM "$wpid"; wait "$wpid"
echo "canary jobs: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
