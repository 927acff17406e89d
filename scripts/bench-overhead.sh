#!/usr/bin/env bash
# Overhead of gputrace against the same workloads untraced, the CUPTI floor, dormant
# preload and torch.profiler, on the GPU machine, in one call. Builds nothing: carries
# target/release/{gputrace,libgputrace.so}.
#
#   ROUNDS=10 scripts/bench-overhead.sh       # results in $OUT/overhead.json (+ a table)
#   ONLY=launch LAUNCH_REPS=30 ROUNDS=25 scripts/bench-overhead.sh   # launch-bound loop only
#
# Modes run interleaved (A B C D E A B C D E ...), one process per mode and round, each
# running all three workloads, every process pinned to the same cores (CPUS); per-
# iteration medians inside a process, then the median over rounds, with min and max.
# Raw per-process results go to $OUT/raw/; rounds from several calls (the device's
# 10-minute limit) are merged by
#   scripts/overhead_summary.py bench/overhead.json RAWDIR1 RAWDIR2 ...
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/bench-out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-10}
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
LIB=$ROOT/target/release/libgputrace.so
W=/tmp/bench; rm -rf "$W"; mkdir -p "$W"
B="$ROOT/scripts/workloads/bench/bench_workload.py --only ${ONLY:-launch,mlp,resnet50} --launch-reps ${LAUNCH_REPS:-10}"
export PYTHONUNBUFFERED=1
CPUS=${CPUS:-2-9}
P="taskset -c $CPUS"
# BUDGET_S: stop starting new rounds after this many seconds (the tables use what ran).
BUDGET_S=${BUDGET_S:-100000}
T0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then echo "stopping after $((r-1)) rounds (BUDGET_S)"; ROUNDS=$((r-1)); break; fi
  $P "$PY" $B >>"$W/untraced.jsonl" 2>>"$W/err.log"
  GPUTRACE_DIR=$W/t/gputrace LD_PRELOAD=$LIB $P "$PY" $B >>"$W/gputrace.jsonl" 2>>"$W/err.log"
  GPUTRACE_DIR=$W/t/floor GPUTRACE_ACTIVITY=kernel GPUTRACE_API=0 GPUTRACE_DRIVER_API=0 GPUTRACE_HOOKS=0 LD_PRELOAD=$LIB $P "$PY" $B >>"$W/cupti_floor.jsonl" 2>>"$W/err.log"
  GPUTRACE_MODE=dormant LD_PRELOAD=$LIB $P "$PY" $B >>"$W/dormant.jsonl" 2>>"$W/err.log"
  # The JSON export (for the trace-size comparison) only in the first round: it is slow.
  if [ "$r" -eq 1 ]; then
    $P "$PY" $B --profile "$W/prof_1.json" >>"$W/torch_profiler.jsonl" 2>>"$W/err.log"
  else
    $P "$PY" $B --profile /dev/null --no-export >>"$W/torch_profiler.jsonl" 2>>"$W/err.log"
  fi
done
# Trace size: bytes on disk per GPU event, ours (first gputrace round) and torch.profiler's JSON.
TF=$(ls "$W"/t/gputrace/*.gtrace | head -1)
GPU_EVENTS=$("$ROOT/target/release/gputrace" dump "$TF" 2>>"$W/err.log" | grep -c -E '"type":"(kernel|memcpy|memset)"')
PROF_EVENTS=$(head -1 "$W/torch_profiler.jsonl" | "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read()).get("profiler_gpu_events", 0))' 2>/dev/null || echo 0)
mkdir -p "$OUT/raw"; cp "$W"/*.jsonl "$OUT/raw/" 2>/dev/null
echo "{\"gputrace_bytes\": $(stat -c %s "$TF"), \"gputrace_gpu_events\": $GPU_EVENTS, \"torch_profiler_json_bytes\": $(stat -c %s "$W/prof_1.json" 2>/dev/null || echo null), \"torch_profiler_gpu_events\": ${PROF_EVENTS:-0}}" >"$OUT/raw/trace_size.json"
"$PY" "$ROOT/scripts/overhead_summary.py" "$OUT/overhead.json" "$OUT/raw"
cp "$W/err.log" "$OUT/bench-err.log" 2>/dev/null
