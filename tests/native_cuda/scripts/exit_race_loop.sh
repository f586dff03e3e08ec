#!/bin/sh
# Issue 13's exit race, counted: run training_step.py N times under `fakegpu run --devices a100:2` while two CPU
# burners keep the cores busy, and count the exits by SIGABRT ("terminate called without an active exception").
#   tests/native_cuda/scripts/exit_race_loop.sh [N=40] [BURNERS=2]
# Prints one line per run (rc, last stderr line) and a summary; the burners are killed on the way out.
set -u
N=${1:-40}
BURNERS=${2:-2}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
SCRIPT=$ROOT/tests/native_cuda/scripts/training_step.py
WORK=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
i=0
while [ "$i" -lt "$BURNERS" ]; do
    "$PY" -c 'while 1: pass' &
    pids="$pids $!"
    i=$((i + 1))
done
aborts=0 other=0 ok=0
i=0
while [ "$i" -lt "$N" ]; do
    i=$((i + 1))
    "$PY" -m fakegpu run --devices a100:2 --report-dir "$WORK/rep" -- "$PY" "$SCRIPT" >"$WORK/out" 2>"$WORK/err"
    rc=$?
    last=$(tail -n 1 "$WORK/err")
    if [ "$rc" -eq 0 ] && grep -qx step-ok "$WORK/out"; then
        ok=$((ok + 1))
    elif [ "$rc" -eq 134 ] || [ "$rc" -eq 250 ] || [ "$rc" -eq 6 ]; then
        aborts=$((aborts + 1))
    else
        other=$((other + 1))
    fi
    echo "run $i: rc=$rc stdout=$(tr '\n' ' ' <"$WORK/out") last-stderr=$last"
    rm -rf "$WORK/rep"
done
echo "runs=$N ok=$ok aborts=$aborts other=$other burners=$BURNERS"
