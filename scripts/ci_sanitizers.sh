#!/usr/bin/env bash
# The sanitizer and fuzzing CI configurations (.ci/run runs them after the
# main tests; each can be run alone):
#   asan  clang-14, AddressSanitizer + UndefinedBehaviorSanitizer (+ libFuzzer
#         coverage, -Wthread-safety) in build-asan/: every unit and
#         integration test (the Python-only manifest check aside)
#   fuzz  each libFuzzer target for FUZZ_SECONDS (default 60) from its seeds
#         (needs the asan build)
#   tsan  gcc, ThreadSanitizer in build-tsan/: the coordinator and worker
#         tests (scheduler, stores, services, workers, auth, triage end to end,
#         the multi-process and two-coordinator integration tests)
# Tests needing PostgreSQL start their own throwaway server (tests/pg_server.h).
# Usage: scripts/ci_sanitizers.sh [asan|fuzz|tsan|all]   (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
bash scripts/setup.sh
jobs=$(nproc)
san_env() {
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:handle_segv=0"
  export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/sanitizers/ubsan.supp"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:handle_segv=0:suppressions=$PWD/tests/sanitizers/tsan.supp"
}
san_env

if [[ $what == asan || $what == fuzz || $what == all ]]; then
  echo "== ASan + UBSan (clang-14, libFuzzer targets) =="
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMXVAL_OPT_FLAGS="-O1 -gline-tables-only" \
    -DMXVAL_SANITIZE=address,undefined -DMXVAL_FUZZ=ON -DMXVAL_CUDA=OFF -DMXVAL_HIP=OFF -DMXVAL_BENCH=OFF \
    >build-asan.cmake.log 2>&1 || { cat build-asan.cmake.log; exit 1; }
  cmake --build build-asan -j "$jobs"
fi
if [[ $what == asan || $what == all ]]; then
  # Not here: the manifest check (Python only) and the Prometheus scrape test,
  # whose scrape/rule timing is unreliable at ASan speed (the metrics code runs
  # under ASan in metrics_test and the chaos test); and the Python kernel
  # library test, whose task child is Debian's python3 loading libmxval_task.so
  # (an instrumented object in an uninstrumented interpreter: ASan refuses
  # to start; the task child's C++ runs under ASan through `mxval __run-task`).
  (cd build-asan && ctest --output-on-failure -j "$jobs" --timeout 1200 \
    -E '^(deploy_test|prometheus_integration_test|python_library_e2e)$')
fi
if [[ $what == fuzz || $what == all ]]; then
  echo "== libFuzzer: ${FUZZ_SECONDS:-60} s per target =="
  bash scripts/fuzz.sh build-asan "${FUZZ_SECONDS:-60}" "$jobs"
fi
if [[ $what == tsan || $what == all ]]; then
  echo "== TSan (gcc): coordinator and worker =="
  tsan_tests=(scheduler_test store_test coordinator_service_test task_runner_test worker_test auth_test tls_front_test
              triage_e2e_test metrics_test service_integration_test multi_coordinator_test)
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMXVAL_OPT_FLAGS="-O1 -g1" \
    -DMXVAL_SANITIZE=thread -DMXVAL_CUDA=OFF -DMXVAL_HIP=OFF \
    -DMXVAL_BENCH=OFF >build-tsan.cmake.log 2>&1 || { cat build-tsan.cmake.log; exit 1; }
  cmake --build build-tsan -j "$jobs" --target mxval "${tsan_tests[@]}"
  regex="^($(IFS='|'; echo "${tsan_tests[*]}"))\$"
  (cd build-tsan && ctest --output-on-failure -j "$jobs" --timeout 1200 -R "$regex")
fi
echo "sanitizers: $what passed"
