#!/usr/bin/env bash
# NVML GPM (GPU performance metrics) read by `gputrace run` from outside the job, on the
# GPU host. Budget: 180 s wall (each run has its own timeout; no new run starts after
# BUDGET_S - 25 s). Builds nothing: target/release/{gputrace,libgputrace.so} are built on
# the CPU machine and carried.
#   1. `gputrace doctor --json`: the gpm line of each GPU;
#   2. the pathology suite's memory_bound.py (elementwise chain on a 2 GiB tensor) and
#      matmul_bf16.py (8192^3 bf16 matmuls) under `gputrace run` (GPM every 100 ms), checked
#      with check.py against expect.json: memory_bound must be the top finding with the
#      measured DRAM %, the matmul must get no memory_bound and reports its tensor %;
#   3. more suite workloads (SUITE) for a table of measured SM activity and occupancy
#      beside the report's estimate from grid sizes;
#   4. the GPM period: memory_bound.py at 20, 50 and 100 ms (PERIODS): samples valid and
#      evenly spaced? and the sampler threads' own CPU time.
# Results are appended to $OUT/gpm/summary.jsonl as each is measured (one line per run;
# scripts/workloads/gpm/measure.py); traces and reports stay under $OUT/gpm/<run>/.
# The table is printed last (and written to $OUT/gpm/table.txt).
#   scripts/gpu-gpm.sh              (BUDGET_S=180 SECONDS_LOOP=3 SUITE="..." PERIODS="...")
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/gpm; mkdir -p "$D"
GT=$ROOT/target/release/gputrace
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
W=$ROOT/scripts/workloads/pathology
M=$ROOT/scripts/workloads/gpm/measure.py
BUDGET_S=${BUDGET_S:-180}
export SECONDS_LOOP=${SECONDS_LOOP:-3}
SUITE=${SUITE:-"small_grid launch_bound healthy"}
PERIODS=${PERIODS:-"20 50 100"}
START=$SECONDS

left() { echo $((BUDGET_S - 25 - (SECONDS - START))); }

{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$GT" --version; } >"$D/host.txt" 2>&1
timeout 20 "$GT" doctor --json >"$D/doctor.json" 2>"$D/doctor.err"
"$PY" - "$D" <<'PY'
import json, sys
d = sys.argv[1]
try:
    doc = json.load(open(d + "/doctor.json"))
    rows = [c for c in doc["checks"] if c["check"] == "gpm"]
except Exception as e:
    rows = [{"error": str(e)}]
open(d + "/summary.jsonl", "a").write(json.dumps({"doctor_gpm": rows}) + "\n")
PY
echo "doctor done at $((SECONDS - START))s"

run() { # name gpm_ms timeout script
  local t=$3
  [ "$(left)" -lt 15 ] && { echo "skipped $1: budget"; return; }
  [ "$t" -gt "$(left)" ] && t=$(left)
  "$PY" "$M" "$GT" "$D" "$1" "$2" "$t" -- "$PY" "$W/$4" >/dev/null 2>>"$D/measure.err"
  echo "$1 done at $((SECONDS - START))s"
}

run memory_bound 100 45 memory_bound.py
run matmul_bf16 100 45 matmul_bf16.py
# The suite's expectations for these two (memory_bound top with DRAM %, no memory_bound
# on the matmul, its tensor %), as run.sh checks the whole suite.
mkdir -p "$D/check"
for n in memory_bound matmul_bf16; do cp "$D/$n/report.json" "$D/check/$n.json" 2>/dev/null; done
"$PY" "$W/check.py" "$D/check" --only memory_bound,matmul_bf16 --out "$D/check/summary.json" >"$D/check.txt" 2>&1
for s in $SUITE; do run "$s" 100 30 "$s.py"; done
for p in $PERIODS; do
  [ "$p" = 100 ] && continue # the first run above
  run "memory_bound_${p}ms" "$p" 35 memory_bound.py
done

"$PY" - "$D" <<'PY' | tee "$D/table.txt"
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(d + "/summary.jsonl") if l.strip()]
f = lambda v, s="%": "-" if v is None else ("%.0f%s" % (v, s))
print("GPM line of gputrace doctor:", next((r["doctor_gpm"] for r in rows if "doctor_gpm" in r), "-"))
print()
print("%-22s %4s %5s %6s %6s %6s %6s %9s %9s  %s" % ("workload", "rc", "GPM", "SM", "occ", "tensor", "DRAM", "estimate", "GPU-Util", "top finding (memory_bound DRAM %)"))
for r in rows:
    if "workload" not in r:
        continue
    rep = r.get("report") or {}
    m = rep.get("measured") or {}
    print("%-22s %4s %5s %6s %6s %6s %6s %9s %9s  %s (%s)" % (
        r["workload"], r["rc"], (r.get("samples") or {}).get("n", "-"),
        f(m.get("sm_active_pct")), f(m.get("occupancy_pct")), f(m.get("tensor_active_pct")),
        f(m.get("dram_pct")), f(rep.get("sm_fill_estimate_pct")), f(rep.get("gpu_util_pct")),
        rep.get("top_finding"), f(rep.get("memory_bound_dram_pct"))))
print()
print("%-22s %6s %5s %8s %8s %8s %8s %7s %9s %9s" % ("period run", "period", "n", "median", "p10", "p90", "max", "spread", "gpm ms/s", "env ms/s"))
for r in rows:
    if not r.get("workload", "").startswith("memory_bound"):
        continue
    s = r.get("samples") or {}
    c = r.get("sampler_cpu_ms_per_s") or {}
    print("%-22s %6s %5s %8s %8s %8s %8s %7s %9s %9s" % (
        r["workload"], r["gpm_ms"], s.get("n"), s.get("interval_ms_median"), s.get("interval_ms_p10"),
        s.get("interval_ms_p90"), s.get("interval_ms_max"), s.get("interval_spread_pct"),
        c.get("gputrace-gpm"), c.get("gputrace-env")))
print()
print(open(d + "/check.txt").read())
PY
echo "total $((SECONDS - START))s"
