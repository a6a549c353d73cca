#!/usr/bin/env bash
# Sets up, builds and runs every test (GoogleTest via CTest). CI runs this.
# The PostgreSQL store tests use one throwaway server on loopback, started
# here (scripts/pg_test_server.sh) and stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
root=$PWD
pgdir=$(mktemp -d /tmp/mxval_test_pg.XXXXXX)
trap 'bash "$root/scripts/pg_test_server.sh" stop "$pgdir"' EXIT
MXVAL_TEST_PG=$(bash "$root/scripts/pg_test_server.sh" start "$pgdir" $$)
export MXVAL_TEST_PG
echo "test.sh: PostgreSQL for the store tests at $MXVAL_TEST_PG"
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
# The log-triage corpus score, for the CI log (ctest checked it above).
/usr/bin/python3 "$root/tests/triage_corpus_test.py" --mxval "$root/build/bin/mxval" \
  --corpus "$root/tests/data/triage/corpus" >"$root/build/triage_corpus.txt" 2>&1 || true
grep -E '^log-triage|^  (dev|holdout|all)' "$root/build/triage_corpus.txt" || true
