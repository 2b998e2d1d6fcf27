#!/usr/bin/env bash
# soak-tests.sh N [--load K] [pytest args...] — run the whole suite N times in a row (the README's
# command, four xdist workers); print "N runs, K failed".
#
# The flake budget: a test that fails once in N runs is a failing test. Each run's
# output goes to soak/run-<i>.log (kept for the failed ones only); the summary lists
# which tests failed in which run. Run it with the local Slurm up
# (scripts/slurm-dev.sh up) and RECONCILER_REQUIRE_SLURM=1 so nothing is skipped.
#
# --load K: K CPU-bound processes (Debian's stress-ng --cpu K, installed here when missing) compete
# with every run, as other work does on a CI machine or a laptop; each is bounded in time and
# stopped when its run ends. The suite's waits for what a test caused stretch by the load factor it
# measures at the start of each run (tests/load.py), printed in the run's header.
set -uo pipefail
cd "$(dirname "$0")/.."

N=${1:?usage: soak-tests.sh N [--load K] [pytest args...]}
shift
LOAD=0
if [ "${1:-}" = "--load" ]; then
  LOAD=${2:?--load K: how many CPU-bound processes}
  shift 2
fi
PY=${PYTHON:-python}
[ -x .venv/bin/python ] && PY=.venv/bin/python
RUN_LIMIT=${SOAK_RUN_LIMIT:-3600}  # seconds: a run this long is broken; neither it nor its load outlives it

if [ "$LOAD" -gt 0 ] && ! command -v stress-ng >/dev/null; then
  echo "installing stress-ng (Debian) for --load"
  { timeout 300 apt-get update -q && timeout 300 apt-get install -y -q --no-install-recommends stress-ng; } \
    >/tmp/soak-apt.log 2>&1 || { tail -5 /tmp/soak-apt.log >&2; echo "cannot install stress-ng" >&2; exit 2; }
fi

mkdir -p soak
failed=0
for i in $(seq 1 "$N"); do
  start=$(date +%s)
  hog=
  if [ "$LOAD" -gt 0 ]; then
    stress-ng --cpu "$LOAD" --cpu-method int64 --timeout "${RUN_LIMIT}s" --quiet &
    hog=$!
  fi
  timeout "$RUN_LIMIT" "$PY" -m pytest -q -n 4 -p no:cacheprovider "$@" >"soak/run-$i.log" 2>&1
  rc=$?
  if [ -n "$hog" ]; then
    kill "$hog" 2>/dev/null  # stress-ng ends its own workers on SIGTERM
    wait "$hog" 2>/dev/null
  fi
  factor=$(grep -m1 -o 'load factor [0-9.]*' "soak/run-$i.log" | awk '{print $3}')
  if [ "$rc" = 0 ]; then
    echo "run $i/$N: passed in $(( $(date +%s) - start ))s (load $LOAD, factor ${factor:-?})"
    rm -f "soak/run-$i.log"
  else
    failed=$((failed + 1))
    echo "run $i/$N: FAILED (exit $rc) in $(( $(date +%s) - start ))s (load $LOAD, factor ${factor:-?}; soak/run-$i.log):"
    grep -E '^(FAILED|ERROR) ' "soak/run-$i.log" | sed 's/^/    /'
  fi
done
echo "$N runs, $failed failed"
[ "$failed" -eq 0 ]
