#!/usr/bin/env bash
# Overhead of gputrace against the same workloads untraced, the CUPTI floor, dormant
# preload and torch.profiler, on the GPU machine, in one call. Builds nothing: carries
# target/release/{gputrace,libgputrace.so}.
#
#   ROUNDS=10 scripts/bench-overhead.sh       # results in $OUT/overhead.json (+ a table)
#
# Modes run interleaved (A B C D E A B C D E ...), one process per mode and round, each
# running all three workloads; per-iteration medians inside a process, then the median
# over rounds, with min and max.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/bench-out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-10}
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
LIB=$ROOT/target/release/libgputrace.so
W=/tmp/bench; rm -rf "$W"; mkdir -p "$W"
B="$ROOT/scripts/gpu/bench_workload.py"
export PYTHONUNBUFFERED=1
# BUDGET_S: stop starting new rounds after this many seconds (the tables use what ran).
BUDGET_S=${BUDGET_S:-100000}
T0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then echo "stopping after $((r-1)) rounds (BUDGET_S)"; ROUNDS=$((r-1)); break; fi
  "$PY" "$B" >>"$W/untraced.jsonl" 2>>"$W/err.log"
  GPUTRACE_DIR=$W/t/gputrace LD_PRELOAD=$LIB "$PY" "$B" >>"$W/gputrace.jsonl" 2>>"$W/err.log"
  GPUTRACE_DIR=$W/t/floor GPUTRACE_ACTIVITY=kernel GPUTRACE_API=0 GPUTRACE_HOOKS=0 LD_PRELOAD=$LIB "$PY" "$B" >>"$W/cupti_floor.jsonl" 2>>"$W/err.log"
  GPUTRACE_MODE=dormant LD_PRELOAD=$LIB "$PY" "$B" >>"$W/dormant.jsonl" 2>>"$W/err.log"
  # The JSON export (for the trace-size comparison) only in the first round: it is slow.
  if [ "$r" -eq 1 ]; then
    "$PY" "$B" --profile "$W/prof_1.json" >>"$W/torch_profiler.jsonl" 2>>"$W/err.log"
  else
    "$PY" "$B" --profile /dev/null --no-export >>"$W/torch_profiler.jsonl" 2>>"$W/err.log"
  fi
done
# Trace size: bytes on disk per GPU event, ours (first gputrace round) and torch.profiler's JSON.
"$ROOT/target/release/gputrace" dump "$(ls "$W"/t/gputrace/*.gtrace | head -1)" >"$W/dump.jsonl" 2>>"$W/err.log"
"$PY" - "$W" "$OUT/overhead.json" "$ROUNDS" <<'PYEOF'
import json, sys, glob, os, statistics as st, datetime
W, dst, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
modes = ["untraced", "gputrace", "cupti_floor", "dormant", "torch_profiler"]
data = {m: [json.loads(l) for l in open(f"{W}/{m}.jsonl") if l.startswith("{")] for m in modes}
res = {"date": datetime.date.today().isoformat(), "machine": "nvidia-h200 (1x H200, driver 580.159.04, torch 2.11.0+cu130)", "rounds": rounds, "workloads": {}}
for wl in ["launch", "mlp", "resnet50"]:
    key = wl + "_us"
    base = [d[key] for d in data["untraced"] if key in d]
    if not base: continue
    b = st.median(base)
    w = {"untraced_us": b, "untraced_min_max_us": [min(base), max(base)]}
    for m in modes[1:]:
        v = [d[key] for d in data[m] if key in d]
        if v:
            w[m] = st.median(v) / b
            w[m + "_min_max_us"] = [min(v), max(v)]
    res["workloads"][wl] = w
ev = sum(1 for l in open(f"{W}/dump.jsonl") if json.loads(l)["type"] in ("kernel", "memcpy", "memset"))
tf = sorted(glob.glob(f"{W}/t/gputrace/*.gtrace"))[0]
pj = f"{W}/prof_1.json"
pe = data["torch_profiler"][0].get("profiler_gpu_events", 0) if data["torch_profiler"] else 0
res["trace_size"] = {"gputrace_bytes": os.path.getsize(tf), "gputrace_gpu_events": ev,
    "gputrace_bytes_per_gpu_event": os.path.getsize(tf) / max(ev, 1),
    "torch_profiler_json_bytes": os.path.getsize(pj) if os.path.exists(pj) else None,
    "torch_profiler_gpu_events": pe,
    "torch_profiler_bytes_per_gpu_event": (os.path.getsize(pj) / max(pe, 1)) if os.path.exists(pj) else None}
json.dump(res, open(dst, "w"), indent=1)
print("%-10s %12s %9s %12s %9s %15s" % ("workload", "untraced", "gputrace", "cupti_floor", "dormant", "torch_profiler"))
for wl, w in res["workloads"].items():
    f = lambda k: ("%.3fx" % w[k]) if k in w else "-"
    print("%-10s %10.1fus %9s %12s %9s %15s" % (wl, w["untraced_us"], f("gputrace"), f("cupti_floor"), f("dormant"), f("torch_profiler")))
t = res["trace_size"]
print("trace bytes/GPU event: gputrace %.1f, torch.profiler JSON %s" % (t["gputrace_bytes_per_gpu_event"], t["torch_profiler_bytes_per_gpu_event"] and round(t["torch_profiler_bytes_per_gpu_event"], 1)))
PYEOF
cp "$W/err.log" "$OUT/bench-err.log" 2>/dev/null
