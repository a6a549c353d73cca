#!/usr/bin/env bash
# Runs every libFuzzer target for a while and prints a summary.
# Usage: scripts/fuzz.sh [BUILD_DIR] [SECONDS_PER_TARGET] [PARALLEL]
#   BUILD_DIR: a build configured with -DMXVAL_FUZZ=ON (scripts/ci_sanitizers.sh
#   makes build-asan); default build-asan. SECONDS default 60, PARALLEL default nproc.
# Each target starts from its committed seeds (tests/fuzz/corpus/<target>) plus
# what earlier runs found (BUILD_DIR/fuzz/corpus/<target>, not committed).
# A crash leaves BUILD_DIR/fuzz/artifacts/<target>-crash-*; copy it to
# tests/fuzz/regressions/<target>/ with the fix, and the replay test
# (ctest -R fuzz_replay) keeps it fixed. Exit 1 if any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
secs=${2:-60}
par=${3:-$(nproc)}
targets=(fuzz_job_spec_proto fuzz_job_spec_text fuzz_npy fuzz_safetensors fuzz_triage_rules fuzz_log_triage
         fuzz_config_table fuzz_yaml_json)
mkdir -p "$build/fuzz/artifacts" "$build/fuzz/logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
run_one() {
  local t=$1
  mkdir -p "$build/fuzz/corpus/$t"
  # -rss_limit_mb / -malloc_limit_mb: an input that makes a parser allocate
  # gigabytes is a finding too. -timeout: one input may not take 10 s.
  if "$build/bin/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=1024 \
       -print_final_stats=1 -artifact_prefix="$build/fuzz/artifacts/$t-" \
       "$build/fuzz/corpus/$t" "tests/fuzz/corpus/$t" >"$build/fuzz/logs/$t.log" 2>&1; then
    echo "ok" >"$build/fuzz/logs/$t.rc"
  else
    echo "crash" >"$build/fuzz/logs/$t.rc"
  fi
}
running=0
for t in "${targets[@]}"; do
  [[ -x "$build/bin/$t" ]] || { echo "fuzz: $build/bin/$t missing (configure with -DMXVAL_FUZZ=ON)"; exit 2; }
  run_one "$t" &
  running=$((running + 1))
  if (( running >= par )); then wait -n; running=$((running - 1)); fi
done
wait
failed=0
printf '%-22s %7s %12s %8s %8s  %s\n' target result execs cov ft corpus
for t in "${targets[@]}"; do
  log="$build/fuzz/logs/$t.log"
  result=$(cat "$build/fuzz/logs/$t.rc")
  execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | awk '{print $2}' || true)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  corpus=$(sed -nE 's/.* corp: ([0-9]+\/[0-9a-zA-Z]+).*/\1/p' <<<"$last")
  printf '%-22s %7s %12s %8s %8s  %s\n' "$t" "$result" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corpus:-?}"
  if [[ $result != ok ]]; then
    failed=1
    echo "---- $t: $log (last lines); artifacts: $(ls "$build/fuzz/artifacts/$t-"* 2>/dev/null | tr '\n' ' ')"
    tail -40 "$log"
  fi
done
exit $failed
