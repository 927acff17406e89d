#!/usr/bin/env bash
# Does closing a trace window crash a program that replays CUDA graphs? A JAX loop (XLA
# replays command buffers, i.e. CUDA graphs) started dormant with the library preloaded,
# one 2 s window, then 8 s more: its exit status, per variant. Builds nothing.
# Results in $OUT/window-graphs/summary.jsonl, a table last.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; D=$OUT/window-graphs; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
LIB=$ROOT/target/release/libgputrace.so
S=$D/summary.jsonl
wait_for() { local i=0; while ! grep -q "$2" "$1" 2>/dev/null; do sleep 0.2; i=$((i+1)); if [ $i -gt $(( $3 * 5 )) ]; then return 1; fi; done; return 0; }
# name | how it starts (pre: preloaded, dormant; late: no preload, attach loads it) | environment
for v in "graphs1|pre|" "graphs2|pre|" "kernel_only|pre|GPUTRACE_ACTIVITY=kernel" "late|late|"; do
  name=${v%%|*}; rest=${v#*|}; how=${rest%%|*}; envs=${rest#*|}
  L=$D/$name.log; : >"$L"
  pre="LD_PRELOAD=$LIB GPUTRACE_MODE=dormant"; [ "$how" = late ] && pre=""
  # shellcheck disable=SC2086
  env $envs $pre GPUTRACE_DIR="$D/$name-t" \
    "$PY" "$ROOT/scripts/workloads/validate/attach_target.py" "$L" 14 jax >"$D/$name.out" 2>&1 &
  pid=$!
  arcs=""
  if wait_for "$L" ready 90; then
    for w in 1 2 3; do
      sleep 1
      timeout 40 "$G" attach $pid --duration 1500ms --no-report -o "$D/$name-t" >>"$D/$name-attach.txt" 2>&1
      arcs="$arcs$?,"
    done
  fi
  wait $pid; rc=$?
  steps=$(grep -c '^step' "$L")
  echo "{\"variant\":\"$name\",\"start\":\"$how\",\"env\":\"$envs\",\"attach_rcs\":\"$arcs\",\"job_rc\":$rc,\"steps\":$steps}" | tee -a "$S"
done
echo "== closing a window on a graph-replaying JAX job"
cat "$S"
