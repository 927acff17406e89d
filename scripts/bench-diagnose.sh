#!/usr/bin/env bash
# Where does the cost go? Interleaved rounds of the launch-bound loop and the ResNet-50
# step under modes that switch one part of gputrace on at a time. GPU machine, one call.
#   ROUNDS=4 scripts/bench-diagnose.sh     -> $OUT/diagnose.json and a table
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/bench-out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-4}
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
LIB=$ROOT/target/release/libgputrace.so
W=/tmp/diag; rm -rf "$W"; mkdir -p "$W"
B="$ROOT/scripts/workloads/bench/bench_workload.py"
export PYTHONUNBUFFERED=1
# mode name | environment (run with env -i style additions)
modes=(
  "untraced|"
  "preload_off|LD_PRELOAD=$LIB GPUTRACE_MODE=off"
  "injection_only_dormant|CUDA_INJECTION64_PATH=$LIB GPUTRACE_MODE=dormant"
  "preload_dormant|LD_PRELOAD=$LIB GPUTRACE_MODE=dormant"
  "floor|LD_PRELOAD=$LIB GPUTRACE_ACTIVITY=kernel GPUTRACE_API=0 GPUTRACE_HOOKS=0"
  "full|LD_PRELOAD=$LIB"
  "full_no_api|LD_PRELOAD=$LIB GPUTRACE_API=0"
  "full_no_hooks|LD_PRELOAD=$LIB GPUTRACE_HOOKS=0"
  "kernel_api_hooks|LD_PRELOAD=$LIB GPUTRACE_ACTIVITY=kernel"
)
for wl in launch resnet50; do
  R=$ROUNDS; [ $wl = resnet50 ] && R=${RESNET_ROUNDS:-2}
  for r in $(seq 1 $R); do
    for m in "${modes[@]}"; do
      name=${m%%|*}; envs=${m#*|}
      [ $wl = resnet50 ] && case $name in preload_off|injection_only_dormant|kernel_api_hooks) continue;; esac
      env $envs GPUTRACE_DIR=$W/t "$PY" "$B" --only $wl >>"$W/$wl.$name.jsonl" 2>>"$W/err.log"
    done
  done
done
"$PY" - "$W" "$OUT/diagnose.json" <<'PYEOF'
import json, sys, glob, os, statistics as st
W, dst = sys.argv[1], sys.argv[2]
res = {}
for wl in ["launch", "resnet50"]:
    vals = {}
    for f in sorted(glob.glob(f"{W}/{wl}.*.jsonl")):
        m = os.path.basename(f)[len(wl) + 1:-6]
        v = [json.loads(l).get(wl + "_us") for l in open(f) if l.startswith("{")]
        v = [x for x in v if x]
        if v: vals[m] = v
    base = st.median(vals["untraced"])
    res[wl] = {m: {"median_us": st.median(v), "ratio": st.median(v) / base, "all": v} for m, v in vals.items()}
json.dump(res, open(dst, "w"), indent=1)
for wl, d in res.items():
    print(wl)
    for m, x in sorted(d.items(), key=lambda kv: kv[1]["ratio"]):
        print("  %-24s %10.2f us  %.3fx" % (m, x["median_us"], x["ratio"]))
PYEOF
# The suite workloads the last validation got wrong for reasons now fixed.
G=$ROOT/target/release/gputrace
for n in small_grid nccl_single_rank; do
  timeout 120 "$G" run -o "$W/suite/$n" -- "$PY" "$ROOT/scripts/workloads/pathology/$n.py" >"$W/$n.out" 2>&1
  "$G" report --json "$W/suite/$n"/*.gtrace >"$OUT/$n.json" 2>>"$W/err.log"
  "$G" report "$W/suite/$n"/*.gtrace >"$OUT/$n.txt" 2>>"$W/err.log"
  head -3 "$OUT/$n.txt"
done
cp "$W/err.log" "$OUT/diag-err.log"
