#!/usr/bin/env bash
# Python / Triton kernel libraries on an NVIDIA GPU machine, in one command
# (from the repository root, with build-gpu/ staged by scripts/stage_gpu_bundle.sh):
#  1. the Triton library tests/python_kernels/triton_mxfp4 against an
#     independent torch reference on guarded, poisoned buffers: the preset
#     shapes and RANDOM_SHAPES (default 300) seeded random shapes, both activation
#     modes, each launched on a side stream and replayed from a CUDA graph
#     (tests/python_kernels/triton_selfcheck.py);
#  2. its bug variants (make_variants.py): each must fail some case;
#  3. through the service (a coordinator and a GPU worker with --python):
#     job c_abi: the built-in CUDA kernels against themselves (C ABI, the
#     mxval task child) and job python: the built-in kernels against the
#     Triton library (the Python task child), on the same shapes, for the
#     per-task time of each kind (attempt wall time, first-run/compile time);
#     then job bug_<variant>: the correct build against each variant, which
#     must be classed PR_TOUCHED.
# Prints a summary last; logs, reports and JSON results under $OUT.
#   PYTHON  interpreter with PyTorch and Triton (default: python3)
#   RANDOM_SHAPES  random shapes for step 1 (default 300)
#   STEPS   which steps to run, in this order (default "3 1 2")
#   T1 T2 T3  seconds allowed to step 1, step 2 and each job of step 3
#             (defaults 150, 80, 90): the summary comes back even when
#             one runs over.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
RANDOM_SHAPES="${RANDOM_SHAPES:-300}"
STEPS="${STEPS:-3 1 2}"
. scripts/gpu_service_common.sh
LIB=tests/python_kernels/triton_mxfp4
summary="$OUT/python_check_summary.txt"
: >"$summary"
variants="$work/variants"
mkdir -p "$variants"
"$PYTHON" tests/python_kernels/make_variants.py "$LIB" "$variants" >"$OUT/variants.txt"

step1() {
  echo "== step 1: self-check, presets + $RANDOM_SHAPES random shapes" | tee -a "$summary"
  timeout "${T1:-150}" "$PYTHON" tests/python_kernels/triton_selfcheck.py --library "$LIB" --random "$RANDOM_SHAPES" \
    --jobs 12 >"$OUT/selfcheck.txt" 2>&1
  echo "selfcheck exit $?: $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/selfcheck.txt" | tail -1)" | tee -a "$summary"
  grep -E "FAIL|Error|error" "$OUT/selfcheck.txt" | head -20 >>"$summary"
}
step2() {
  echo "== step 2: bug variants" | tee -a "$summary"
  timeout "${T2:-80}" "$PYTHON" tests/python_kernels/triton_selfcheck.py --variants-dir "$variants" --jobs 4 \
    >"$OUT/variants_check.txt" 2>&1
  echo "variants exit $?" | tee -a "$summary"
  grep -E "^variant" "$OUT/variants_check.txt" | tee -a "$summary"
}
step3() {
  echo "== step 3: the service" | tee -a "$summary"
  kdir="$work/kernels"
  mkdir -p "$kdir"
  cp -r "$LIB" "$kdir/triton_mxfp4"
  rm -f "$kdir/triton_mxfp4/variants.json"
  cp -r "$variants"/* "$kdir/"
  start_coordinator
  "$BIN" worker --coordinator "$addr" --devices cuda --kernel-dir "$kdir" --python "$(command -v "$PYTHON")" \
    --python-cache-dir "$work/pycache" >"$work/worker.out" 2>"$work/worker.err" &
  wpid=$!
  for d in "$kdir"/*/; do "$BIN" register-library --coordinator "$addr" --dir "$d" >>"$OUT/register.txt" 2>&1; done
  cat "$OUT/register.txt"
  job() {  # name, then the spec as JSON
    echo "$2" >"$work/$1.json"
    local t0=$SECONDS
    timeout "${T3:-90}" "$BIN" submit --coordinator "$addr" --spec "$work/$1.json" --wait --format json \
      >"$OUT/$1.json" 2>"$OUT/$1.err"
    local rc=$?
    "$BIN" get --coordinator "$addr" --job "$(grep -o 'job-[0-9]*' "$OUT/$1.err" | head -1)" --format markdown \
      >"$OUT/$1.md" 2>/dev/null
    echo "job $1: exit $rc in $((SECONDS - t0)) s" | tee -a "$summary"
  }
  shapes='"presets": ["glm5-tp4", "dsv3-tp8"], "m_values": [1, 256, 4096], "target_archs": ["sm_90a"], "repetitions": 10'
  job c_abi "{\"name\": \"c-abi\", $shapes}"
  job python "{\"name\": \"python\", $shapes, \"candidate_kernel\": {\"library\": \"triton_mxfp4\", \"build_id\": \"correct\"}}"
  for v in "$variants"/*/; do
    v=$(basename "$v")
    job "bug_${v#triton_mxfp4_}" "{\"name\": \"$v\", \"presets\": [\"glm5-tp4\"], \"m_values\": [4, 64],
      \"target_archs\": [\"sm_90a\"], \"activations\": \"ACTIVATIONS_MXFP4_EVEN\", \"repetitions\": 10,
      \"baseline_kernel\": {\"library\": \"triton_mxfp4\", \"build_id\": \"correct\"},
      \"candidate_kernel\": {\"library\": \"$v\", \"build_id\": \"$v\"}}"
  done
  "$PYTHON" - "$OUT" >>"$summary" <<'PY'
import glob, json, os, statistics, sys
from datetime import datetime

def secs(ts):
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()

for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    name = os.path.basename(path)[:-5]
    if name in ("variants",):
        continue
    try:
        job = json.load(open(path))
    except Exception as e:
        print(f"{name}: no JSON ({e})")
        continue
    results = job.get("results", [])
    classes, walls, firsts, eager, py = {}, [], [], 0, ""
    for r in results:
        c = r.get("triage", {}).get("triageClass", r.get("triage", {}).get("triage_class", "?"))
        classes[c] = classes.get(c, 0) + 1
        a = [x for x in r.get("attempts", []) if x.get("started") and x.get("finished")]
        if a:
            walls.append(secs(a[-1]["finished"]) - secs(a[-1]["started"]))
        for side in ("baseline", "candidate"):
            s = r.get(side, {})
            firsts.append((side, s.get("firstRunSeconds", 0)))
            if s.get("timing", {}).get("eagerReason"):
                eager += 1
        py = py or json.dumps(r.get("python", {}))
    bad = [r for r in results if r.get("candidate", {}).get("accuracy", {}).get("verdict") != "VERDICT_PASS"]
    print(f"{name}: {len(results)} tasks, classes {classes}, task wall s median "
          f"{statistics.median(walls) if walls else 0:.2f} max {max(walls) if walls else 0:.2f}, "
          f"first-run s (candidate) median {statistics.median([f for s, f in firsts if s == 'candidate'] or [0]):.2f} "
          f"max {max([f for s, f in firsts if s == 'candidate'] or [0]):.2f}, eager-timed sides {eager}, python {py}")
    for r in bad[:3]:
        acc = r["candidate"].get("accuracy", {})
        fm = acc.get("firstMismatches", [])[:2]
        print(f"  M={r.get('m')} {r.get('shape', {}).get('op')}: {acc.get('verdict')} {acc.get('reason', '')[:300]} "
              f"first mismatches {fm}")
PY
  tail -5 "$work/worker.err" >>"$summary"
}
for step in $STEPS; do "step$step"; done
echo "== summary"
cat "$summary"
if [ "${PACK:-0}" = 1 ]; then
  tar czf "$OUT/python_check.tgz" -C "$OUT" --exclude python_check.tgz . 2>/dev/null
  find "$OUT" -maxdepth 1 -type f ! -name python_check.tgz ! -name python_check_summary.txt -delete
fi
