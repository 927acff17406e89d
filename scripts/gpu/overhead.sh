#!/usr/bin/env bash
# The overhead A/B of issue 27 on the GPU machine: five workloads (launch loop, MLP step,
# ResNet-50 step, token-by-token generation at batch 1, a DataLoader training loop),
# each process one mode, modes interleaved round by round:
#   untraced | cupti_floor (our activity kinds, no callbacks, hooks or samplers) |
#   gputrace (defaults) | torch_profiler
# every process pinned to CPUS (2-9). Builds nothing: uses target/release/libgputrace.so.
# Each process's JSON line is appended to $OUT/overhead/MODE.jsonl as soon as it is
# measured; rounds stop being started after BUDGET_S seconds (default 420: about 8
# minutes in all). Last, a table of medians and ranges (scripts/overhead_summary.py),
# also written to $OUT/overhead/overhead.json. Fold the calls' outputs into bench/ with
#   scripts/overhead_summary.py bench/overhead.json OUTDIR1/overhead [OUTDIR2/overhead ...]
#
#   scripts/gpu/overhead.sh                       # defaults: up to 8 rounds, 420 s
#   ONLY=launch,gen ROUNDS=12 scripts/gpu/overhead.sh
#   MODES="untraced cupti_floor runtime_cb driver_cb gputrace" ONLY=launch scripts/gpu/overhead.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D="$OUT/overhead"; mkdir -p "$D"
ROUNDS=${ROUNDS:-8}
BUDGET_S=${BUDGET_S:-420}
CPUS=${CPUS:-2-9}
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
LIB=$ROOT/target/release/libgputrace.so
[ -f "$LIB" ] || { echo "missing $LIB (carry target/release/libgputrace.so)"; exit 2; }
W=/tmp/overhead-ab; rm -rf "$W"; mkdir -p "$W"
B=("$ROOT/scripts/workloads/bench/bench_workload.py" --only "${ONLY:-launch,mlp,resnet50,gen,loader}" --launch-reps "${LAUNCH_REPS:-10}")
# PIN_MAIN=CPU: the main thread on that CPU alone, the process's other threads on the
# rest of CPUS (bench_workload.py --pin-main).
[ -n "${PIN_MAIN:-}" ] && B+=(--pin-main "$PIN_MAIN")
export PYTHONUNBUFFERED=1
P=(taskset -c "$CPUS")
# Modes: untraced, torch_profiler, and each traced mode with the settings it adds to
# the defaults. Besides the four of the A/B, parts of the tracer one by one:
#   floor_ptb     the CUPTI floor with per-thread activity buffers
#   runtime_cb    + runtime API callbacks
#   driver_cb     + driver API callbacks (forced on, as they are for a driver-API job)
#   no_samplers   the defaults without the host sampler and Python call sites
#   gputrace_ptb  the defaults with per-thread activity buffers
#   api_activity  runtime calls as CUPTI RUNTIME activity records, no callbacks
#   gputrace_b    the defaults with the library LIB_B (an A/B of two builds)
#   no_handover   the defaults without the periodic handover (GPUTRACE_HANDOVER_MS=0)
#   handover_forced  the defaults with the handover's flush forced
MODES=${MODES:-untraced cupti_floor gputrace torch_profiler}
OFF="GPUTRACE_HOOKS=0 GPUTRACE_HOST=0 GPUTRACE_PYSTACK=0"
FLOOR="GPUTRACE_API=0 GPUTRACE_DRIVER_API=0 $OFF"
mode_env() {
  case $1 in
    cupti_floor) echo "$FLOOR" ;;
    floor_ptb) echo "$FLOOR GPUTRACE_PER_THREAD_BUFFERS=1" ;;
    runtime_cb) echo "GPUTRACE_DRIVER_API=0 $OFF" ;;
    driver_cb) echo "GPUTRACE_DRIVER_API=1 $OFF" ;;
    no_samplers) echo "GPUTRACE_HOST=0 GPUTRACE_PYSTACK=0" ;;
    gputrace_ptb) echo "GPUTRACE_PER_THREAD_BUFFERS=1" ;;
    api_activity) echo "GPUTRACE_API=activity $OFF" ;;
    no_handover) echo "GPUTRACE_HANDOVER_MS=0" ;;
    handover_forced) echo "GPUTRACE_HANDOVER_FORCED=1" ;;
    gputrace | gputrace_b) echo "" ;;
    *) return 1 ;;
  esac
}
for m in $MODES; do
  case $m in untraced | torch_profiler) ;; *) mode_env "$m" >/dev/null || { echo "unknown mode $m"; exit 2; } ;; esac
done
[ -n "${LIB_B:-}" ] || case " $MODES " in *" gputrace_b "*) echo "gputrace_b needs LIB_B"; exit 2 ;; esac
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true

one() {  # MODE: one process, its line appended to $D/MODE.jsonl
  local mode=$1 line lib=$LIB
  [ "$mode" = gputrace_b ] && lib=$LIB_B
  case $mode in
    untraced) line=$("${P[@]}" "$PY" "${B[@]}" 2>>"$D/err.log" | tail -1) ;;
    torch_profiler) line=$("${P[@]}" "$PY" "${B[@]}" --profile /dev/null --no-export 2>>"$D/err.log" | tail -1) ;;
    # shellcheck disable=SC2046 # the mode's settings are words
    *) line=$(env $(mode_env "$mode") GPUTRACE_DIR="$W/t/$mode" LD_PRELOAD="$lib" "${P[@]}" "$PY" "${B[@]}" 2>>"$D/err.log" | tail -1) ;;
  esac
  case $line in "{"*) echo "$line" >>"$D/$mode.jsonl"; echo "$mode $line" ;; *) echo "$mode failed (see $D/err.log)" ;; esac
}

T0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then echo "stopping after $((r-1)) rounds (BUDGET_S=$BUDGET_S)"; break; fi
  echo "round $r ($(( $(date +%s) - T0 )) s)"
  # Rotate the order so no mode always runs first after a slow stretch.
  read -ra ms <<<"$MODES"; n=${#ms[@]}; order=""
  for i in $(seq 0 $((n - 1))); do order="$order ${ms[$(( (i + r - 1) % n ))]}"; done
  for m in $order; do one "$m"; done
done
# The tracer's own cost, read from the first gputrace trace (TracerCost events).
TF=$(ls "$W"/t/gputrace/*.gtrace 2>/dev/null | head -1)
if [ -n "$TF" ] && [ -x "$ROOT/target/release/gputrace" ]; then
  "$ROOT/target/release/gputrace" dump "$TF" 2>>"$D/err.log" | "$PY" -c '
import json, sys
c = n = 0
for l in sys.stdin:
    if "\"tracer_cost\"" in l:
        e = json.loads(l); c += e.get("calls", 0); n += e.get("ns", 0)
print(json.dumps({"callbacks": c, "ns": n, "ns_per_callback": n / c if c else None}))' >"$D/tracer_cost.json"
  echo "tracer cost: $(cat "$D/tracer_cost.json")"
fi
"$PY" "$ROOT/scripts/overhead_summary.py" "$D/overhead.json" "$D" | tee "$D/table.txt"
