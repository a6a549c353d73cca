#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with build-gpu/ staged by
# scripts/stage_gpu_bundle.sh: the service end to end on real GPUs. A
# coordinator, one worker daemon that discovers the CUDA devices, and a job
# that validates a retune the way a pull request would be validated:
# baseline = an earlier sm_90a table, candidate = the shipped table, on the
# GLM-5 TP4 shapes. Writes the Markdown, JUnit and JSON reports and the
# worker's metrics.
#   BASELINE_TABLE  default bench/tables/sm_90a_before_decode.json (M <= 64
#                   buckets before a16wfp4_decode); bench/tables/
#                   sm_90a_before_wgmma.json is the table before a16wfp4_wgmma
#                   (sm_90a_before_prmt.json, sm_90a_before_rowtiles.json,
#                   sm_90a_before_kw16.json, sm_90a_before_rs.json,
#                   sm_90a_before_rs_vup.json, sm_90a_before_rs_small.json,
#                   sm_90a_before_rs_dsv3_kup64.json,
#                   sm_90a_before_rs_glm5_vup2048.json,
#                   sm_90a_before_deq15.json, sm_90a_before_rs32.json,
#                   sm_90a_before_rs32_dsv3_vup256.json,
#                   sm_90a_before_midm.json: the
#                   tables before those retunes)
#   PRESETS         comma-separated shape presets (default glm5-tp4)
#   TAG             report name suffix (default: none)
#   M_VALUES        comma-separated M values (default 1,4,16,64,256,1024,4096,16384)
#   REPETITIONS     timed samples per side (default 10; the worker's harness
#                   takes at least 10)
#   LAUNCH          plain (default) or pdl: the job's launch mode (submit
#                   --launch); with pdl the kernels that act on it run their
#                   correctness check behind the late writer and are timed
#                   with programmatic dependent launch
#   CANDIDATE_LAUNCH  plain or pdl: the candidate side's launch (submit
#                   --candidate-launch; default: LAUNCH). With the shipped table
#                   as baseline, LAUNCH=plain CANDIDATE_LAUNCH=pdl measures what
#                   PDL buys
set -uo pipefail
cd "$(dirname "$0")/.."
BASELINE_TABLE="${BASELINE_TABLE:-bench/tables/sm_90a_before_decode.json}"
PRESETS="${PRESETS:-glm5-tp4}"
LAUNCH="${LAUNCH:-plain}"
CANDIDATE_LAUNCH="${CANDIDATE_LAUNCH:-$LAUNCH}"
M_VALUES="${M_VALUES:-1,4,16,64,256,1024,4096,16384}"
REPETITIONS="${REPETITIONS:-10}"
. scripts/gpu_service_common.sh
start_coordinator
"$BIN" worker --coordinator "$addr" --devices cuda --metrics-listen 127.0.0.1:19464 2>"$work/worker.err" &
wpid=$!

python3 - "$work/spec.json" "$BASELINE_TABLE" "$PRESETS" "$LAUNCH" "$CANDIDATE_LAUNCH" "$M_VALUES" "$REPETITIONS" <<'PY'
import json, sys
base_path, presets, launch, cand_launch = sys.argv[2], sys.argv[3].split(","), sys.argv[4], sys.argv[5]
m_values, repetitions = [int(m) for m in sys.argv[6].split(",")], int(sys.argv[7])
base = json.load(open(base_path))
cand = json.load(open("kernels/configs/sm_90a.json"))
spec = {
    "name": "h200 %s: %s (launch %s) vs the shipped sm_90a table (launch %s)" % (
        ",".join(presets), base_path, launch, cand_launch),
    "presets": presets,
    "m_values": m_values,
    "target_archs": ["sm_90a"],
    "baseline_table": {"name": base_path, "json": json.dumps(base)},
    "candidate_table": {"name": "kernels/configs/sm_90a.json", "json": json.dumps(cand)},
    "pull_request": {"changed_files": ["kernels/gpu/a16wfp4_gpu.cu", "kernels/configs/sm_90a.json"]},
    "repetitions": repetitions,
}
json.dump(spec, open(sys.argv[1], "w"), indent=1)
PY
start=$(date +%s)
"$BIN" submit --coordinator "$addr" --spec "$work/spec.json" --request-id h200-e2e --launch "$LAUNCH" --candidate-launch "$CANDIDATE_LAUNCH" --wait --format markdown \
  --out "$OUT/h200_service_job${TAG}.md" --timeout 500
rc=$?
echo "submit --wait exit code $rc after $(( $(date +%s) - start )) s"
job=$("$BIN" jobs --coordinator "$addr" | awk 'NR==2{print $1}')
"$BIN" get --coordinator "$addr" --job "$job" --format junit --out "$OUT/h200_service_job${TAG}.xml"
"$BIN" get --coordinator "$addr" --job "$job" --format json --out "$OUT/h200_service_job${TAG}.json"
"$BIN" workers --coordinator "$addr"
curl -s 127.0.0.1:19464/metrics | grep -E '^mxval_worker_(kernel|task|device|timing)' | head -400 >"$OUT/h200_worker_metrics${TAG}.txt"
cat "$OUT/h200_service_job${TAG}.md"
echo "--- worker stderr"; tail -5 "$work/worker.err"
kill -TERM "$wpid"; wait "$wpid"
echo "worker drained: exit $?"
exit $rc
