#!/usr/bin/env bash
# The environment layer on the GPU host, in one device call of about 4 minutes. Builds
# nothing: expects target/release/{gputrace,libgputrace.so} built here and carried.
#   1. gputrace doctor (text and --json);
#   2. the shared-GPU workload (scripts/workloads/pathology/shared_gpu.py) traced, its
#      report, and the check that env_shared_gpu is the top finding;
#   3. the NVML sampler's cost: interleaved A/B of the MLP step traced with the sampler
#      on (GPUTRACE_NVML_MS=100) and off (0), ROUNDS pairs, order alternating; the
#      summary is the median of the per-pair ratios (target <= 1.003).
# Writes under $OUT: doctor.txt, doctor.json, shared_gpu/{log,report.txt,report.json,
# dump-env.jsonl}, env_ab.jsonl, summary.json.
#   ROUNDS=6 AB_SECONDS=4 scripts/gpu-env.sh
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT/shared_gpu"
GT=$ROOT/target/release/gputrace
LIB=$ROOT/target/release/libgputrace.so
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
ROUNDS=${ROUNDS:-6}
AB_SECONDS=${AB_SECONDS:-4}
CPUS=${CPUS:-2-9}

# 1. The checklist, with no job running.
"$GT" doctor >"$OUT/doctor.txt" 2>&1
"$GT" doctor --json >"$OUT/doctor.json" 2>>"$OUT/doctor.txt"
echo "doctor done at ${SECONDS}s: $(grep -c '^WARN' "$OUT/doctor.txt") warnings"

# 2. A job sharing its GPU with an untraced process.
S=$OUT/shared_gpu
rm -rf "$S/traces"
timeout 150 "$GT" run -o "$S/traces" -- "$PY" "$ROOT/scripts/workloads/pathology/shared_gpu.py" >"$S/log" 2>&1
traces=("$S/traces"/*.gtrace)
"$GT" report "${traces[@]}" >"$S/report.txt" 2>>"$S/log"
"$GT" report --json "${traces[@]}" >"$S/report.json" 2>>"$S/log"
"$GT" dump "${traces[0]}" 2>>"$S/log" | grep -E '"type":"(fact|gpu_sample|gpu_process|gpu_event)"' >"$S/dump-env.jsonl"
echo "shared_gpu done at ${SECONDS}s: top finding $("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("top_finding"))' "$S/report.json" 2>&1)"

# 3. Sampler on against off, interleaved.
: >"$OUT/env_ab.jsonl"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="100 0"; else order="0 100"; fi
  for ms in $order; do
    GPUTRACE_NVML_MS=$ms GPUTRACE_DIR=/tmp/env_ab LD_PRELOAD="$LIB" PYTHONPATH="$ROOT/scripts/workloads/bench" \
      taskset -c "$CPUS" "$PY" "$ROOT/scripts/workloads/bench/env_ab.py" --seconds "$AB_SECONDS" \
      2>>"$OUT/env_ab.err" | sed "s/^{/{\"round\": $r, /" >>"$OUT/env_ab.jsonl"
    rm -rf /tmp/env_ab
  done
done
echo "A/B done at ${SECONDS}s"

"$PY" - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/env_ab.jsonl") if l.strip()]
pairs = []
for r in sorted({x["round"] for x in rows}):
    on = [x for x in rows if x["round"] == r and x["nvml_ms"] == "100"]
    off = [x for x in rows if x["round"] == r and x["nvml_ms"] == "0"]
    if on and off:
        pairs.append({"round": r, "on_us": on[0]["median_us"], "off_us": off[0]["median_us"],
                      "ratio": on[0]["median_us"] / off[0]["median_us"],
                      "ratio_min": on[0]["min_us"] / off[0]["min_us"]})
try:
    rep = json.load(open(f"{out}/shared_gpu/report.json"))
    top = rep.get("top_finding")
    shared = next((f for f in rep.get("findings", []) if f["id"] == "env_shared_gpu"), None)
except Exception as e:
    top, shared = f"no report: {e}", None
s = {
    "sampler_ab": {"pairs": pairs,
                   "median_ratio": statistics.median([p["ratio"] for p in pairs]) if pairs else None,
                   "median_ratio_min": statistics.median([p["ratio_min"] for p in pairs]) if pairs else None,
                   "target": 1.003},
    "shared_gpu": {"top_finding": top, "pass": top == "env_shared_gpu",
                   "finding": shared},
}
json.dump(s, open(f"{out}/summary.json", "w"), indent=1)
print(json.dumps({"sampler_median_ratio": s["sampler_ab"]["median_ratio"],
                  "shared_gpu_top": top}))
PY
