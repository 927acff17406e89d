#!/usr/bin/env bash
# Where the launch-bound cost goes, and whether any CUPTI configuration is cheaper than
# the floor: the launch-bound loop (20 000 x x.add_(1) per measured block) under one
# mode per process, modes interleaved, ROUNDS rounds, every process pinned to the same
# cores. GPU machine, one call; builds nothing (carries target/release/libgputrace.so).
#
#   ROUNDS=6 scripts/bench-sweep.sh        -> $OUT/sweep.json and a table
#   SWEEP=kinds ROUNDS=6 scripts/bench-sweep.sh   (one activity kind at a time)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/bench-out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-6}
BUDGET_S=${BUDGET_S:-100000}
CPUS=${CPUS:-2-9}
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
LIB=$ROOT/target/release/libgputrace.so
W=/tmp/sweep; rm -rf "$W"; mkdir -p "$W"
B="$ROOT/scripts/workloads/bench/bench_workload.py"
export PYTHONUNBUFFERED=1
cat /sys/devices/system/clocksource/clocksource0/current_clocksource >"$OUT/clocksource.txt" 2>&1
FLOOR="GPUTRACE_ACTIVITY=kernel GPUTRACE_API=0 GPUTRACE_HOOKS=0"
# name | environment added to LD_PRELOAD=libgputrace.so (untraced: no preload)
if [ "${SWEEP:-cupti}" = kinds ]; then
# SWEEP=kinds: which activity kind costs on the launch path (no callbacks, no hooks).
K="GPUTRACE_API=0 GPUTRACE_HOOKS=0 GPUTRACE_ACTIVITY"
modes=(
  "untraced|-"
  "floor|$FLOOR"
  "kernel,memcpy,memset|$K=kernel,memcpy,memset"
  "kernel,sync|$K=kernel,sync"
  "kernel,memory|$K=kernel,memory"
  "kernel,device|$K=kernel,device"
  "kernel+callbacks|GPUTRACE_ACTIVITY=kernel GPUTRACE_HOOKS=0"
  "kernel+callbacks+hooks|GPUTRACE_ACTIVITY=kernel"
  "full|GPUTRACE_DEBUG=0"
  "dormant|GPUTRACE_MODE=dormant"
)
else
modes=(
  "untraced|-"
  "floor|$FLOOR"
  "floor+hooks|GPUTRACE_ACTIVITY=kernel GPUTRACE_API=0"
  "kernel+callbacks|GPUTRACE_ACTIVITY=kernel GPUTRACE_HOOKS=0"
  "kernel+api_activity|GPUTRACE_ACTIVITY=kernel GPUTRACE_HOOKS=0 GPUTRACE_API=activity"
  "full|GPUTRACE_DEBUG=0"
  "full,api_activity|GPUTRACE_API=activity"
  "full,no_api|GPUTRACE_API=0"
  "full,per_thread_buffers|GPUTRACE_PER_THREAD_BUFFERS=1"
  "floor,per_thread_buffers|$FLOOR GPUTRACE_PER_THREAD_BUFFERS=1"
  "floor,device_buffer_64mb|$FLOOR GPUTRACE_DEVICE_BUFFER_MB=64"
  "floor,cupti_flush_off|$FLOOR GPUTRACE_CUPTI_FLUSH_MS=0"
  "floor,not_zeroed|$FLOOR GPUTRACE_ZEROED_BUFFERS=0"
  "dormant|GPUTRACE_MODE=dormant"
)
fi
T0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  rm -rf "$W/t"
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then echo "stopping after $((r-1)) rounds (BUDGET_S)"; break; fi
  for m in "${modes[@]}"; do
    name=${m%%|*}; envs=${m#*|}
    if [ "$envs" = "-" ]; then
      taskset -c "$CPUS" "$PY" "$B" --only launch --launch-reps 30 >>"$W/$name.jsonl" 2>>"$W/err.log"
    else
      env $envs GPUTRACE_DIR=$W/t/$name LD_PRELOAD=$LIB taskset -c "$CPUS" "$PY" "$B" --only launch --launch-reps 30 >>"$W/$name.jsonl" 2>>"$W/err.log"
    fi
    echo "$r $name $(tail -1 "$W/$name.jsonl")" >>"$W/progress.log"
  done
done
cp "$W/err.log" "$W/progress.log" "$OUT/" 2>/dev/null
# What the API-activity mode records, next to the callbacks' (last round's traces).
G=$ROOT/target/release/gputrace
for name in full "full,api_activity" "kernel+callbacks"; do
  f=$(ls "$W/t/$name"/*.gtrace 2>/dev/null | head -1); [ -n "$f" ] || continue
  { echo "== $name"; ls -l "$f"; "$G" summary "$f" | head -25; "$G" dump "$f" | grep '"type":"api"' | head -3; } >>"$OUT/api-modes.txt" 2>&1
done
"$PY" - "$W" "$OUT/sweep.json" "${modes[@]}" <<'PYEOF'
import json, sys, statistics as st, datetime
W, dst, modes = sys.argv[1], sys.argv[2], [m.split("|")[0] for m in sys.argv[3:]]
vals = {}
for m in modes:
    try:
        vals[m] = [json.loads(l)["launch_us"] for l in open(f"{W}/{m}.jsonl") if l.startswith("{")]
    except OSError:
        vals[m] = []
base = vals["untraced"]
b = st.median(base)
n = min(len(v) for v in vals.values() if v)
res = {"date": datetime.date.today().isoformat(), "machine": "nvidia-h200 (1x H200)", "workload": "launch-bound x.add_(1), us per launch", "rounds": n, "modes": {}}
for m, v in vals.items():
    if not v: continue
    paired = [v[i] / base[i] for i in range(min(len(v), len(base)))]
    res["modes"][m] = {"median_us": st.median(v), "min_us": min(v), "max_us": max(v), "ratio_of_medians": st.median(v) / b, "median_paired_ratio": st.median(paired), "all_us": v}
json.dump(res, open(dst, "w"), indent=1)
print("%-28s %10s %8s %8s %9s %9s" % ("mode", "median us", "min", "max", "ratio", "paired"))
for m, x in res["modes"].items():
    print("%-28s %10.3f %8.3f %8.3f %8.3fx %8.3fx" % (m, x["median_us"], x["min_us"], x["max_us"], x["ratio_of_medians"], x["median_paired_ratio"]))
PYEOF
