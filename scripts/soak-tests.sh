#!/usr/bin/env bash
# soak-tests.sh N [pytest args...] — run the whole suite N times in a row (the README's command,
# four xdist workers); print "N runs, K failed".
#
# The flake budget: a test that fails once in N runs is a failing test. Each run's
# output goes to soak/run-<i>.log (kept for the failed ones only); the summary lists
# which tests failed in which run. Run it with the local Slurm up
# (scripts/slurm-dev.sh up) and RECONCILER_REQUIRE_SLURM=1 so nothing is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."

N=${1:?usage: soak-tests.sh N [pytest args...]}
shift
PY=${PYTHON:-python}
[ -x .venv/bin/python ] && PY=.venv/bin/python
mkdir -p soak
failed=0
for i in $(seq 1 "$N"); do
  start=$(date +%s)
  if "$PY" -m pytest -q -n 4 -p no:cacheprovider "$@" >"soak/run-$i.log" 2>&1; then
    echo "run $i/$N: passed in $(( $(date +%s) - start ))s"
    rm -f "soak/run-$i.log"
  else
    failed=$((failed + 1))
    echo "run $i/$N: FAILED in $(( $(date +%s) - start ))s (soak/run-$i.log):"
    grep -E '^(FAILED|ERROR) ' "soak/run-$i.log" | sed 's/^/    /'
  fi
done
echo "$N runs, $failed failed"
[ "$failed" -eq 0 ]
