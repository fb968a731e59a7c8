#!/bin/bash
# CPU time (user + sys, one core) of the issue-32 targets, two commits alternating:
#   bench/ab_cpu.sh BASE_COMMIT AFTER_COMMIT [WORKDIR]
# Each tree's src is taken with git archive and compiled (PYTHONDONTWRITEBYTECODE may be set), then
# run with PYTHONPATH=<tree>/src (this checkout's bench/cg.py drives both); the commands: the README default, Tiresias on full Philly, and
# bench/cg.py's 20,000-job Tiresias and FIFO runs. Prints "target tree user+sys".
set -e
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${3:-/tmp/ab_cpu}
py=${PYTHON:-python}
kant=${KANT:-kant}
for name in base after; do
  c=$1; [ "$name" = after ] && c=$2
  rm -rf "$work/$name" && mkdir -p "$work/$name/run"
  git -C "$repo" archive "$c" src | tar -x -C "$work/$name"
  "$py" -m compileall -q "$work/$name/src"
done
t() {  # tree label command...
  local tree=$1 label=$2; shift 2
  (cd "$work/$tree/run" && PYTHONPATH="$work/$tree/src" taskset -c 1 /usr/bin/time -f "%U+%S" "$@" \
    >/dev/null 2>"$work/err") || { echo "$label $tree failed:"; tail -5 "$work/err"; exit 1; }
  echo "$label $tree $(tail -1 "$work/err")"
}
for _ in 1 2 3; do for tree in base after; do t $tree default "$kant" simulate; done; done
for _ in 1 2; do for tree in base after; do
  t $tree tiresias-full "$kant" simulate --policy tiresias --cluster philly --no-report; done; done
for _ in 1 2; do for tree in base after; do
  t $tree tiresias-20k "$py" "$repo/bench/cg.py" philly tiresias 20000
  t $tree fifo-20k "$py" "$repo/bench/cg.py" philly fifo 20000
done; done
uptime
