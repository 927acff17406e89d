#!/usr/bin/env bash
# GPU hardware counters (CUPTI PM sampling) on the GPU host, in one device call of under
# 150 s. Builds nothing: expects target/release/{gputrace,libgputrace.so} built here and
# carried. Runs, each under `gputrace run` with a 35 s timeout:
#   a. memory_bound: x.mul_(1.0001) on a 2 GiB tensor for 4 s, GPUTRACE_PM=1 GPUTRACE_DEBUG=1;
#   b. matmul_bf16: 8192 x 8192 bf16 matmuls for 4 s, the same settings;
#   c. memory_bound again with PM sampling off (a crude time comparison with a);
# and first, ncu's list of the metrics PM sampling has on GH100 (pm_metrics.txt).
# Writes under $OUT: pm.tgz (per run: log with the library's debug lines, report.txt,
# report.json, counters.jsonl and facts.jsonl from `gputrace dump`), summary.json, and
# table.txt, which it prints last.
#   scripts/gpu-pm.sh
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
GT=$ROOT/target/release/gputrace
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
W=$ROOT/scripts/workloads/pathology
WORK=$(mktemp -d /tmp/gpu-pm.XXXXXX)
export SECONDS_LOOP=${SECONDS_LOOP:-4}

one() { # name script pm
  local name=$1 script=$2 pm=$3 d=$WORK/$1
  mkdir -p "$d"
  local t0=$SECONDS
  GPUTRACE_PM=$pm GPUTRACE_DEBUG=1 timeout 35 "$GT" run -o "$d/traces" -- "$PY" "$W/$script" >"$d/log" 2>&1
  echo "rc=$? wall_s=$((SECONDS - t0))" >>"$d/log"
  local traces=("$d/traces"/*.gtrace)
  if [ -e "${traces[0]}" ]; then
    "$GT" report "${traces[@]}" >"$d/report.txt" 2>>"$d/log"
    "$GT" report --json "${traces[@]}" >"$d/report.json" 2>>"$d/log"
    "$GT" dump "${traces[0]}" 2>>"$d/log" | grep '"type":"counter_sample"' >"$d/counters.jsonl"
    "$GT" dump "${traces[0]}" 2>>"$d/log" | grep '"type":"fact"' >"$d/facts.jsonl"
  fi
  echo "$name done at ${SECONDS}s"
}

# The metrics PM sampling offers on this chip (which of our names exist), from ncu.
NCU=$(command -v ncu || echo /usr/local/cuda-13.0/bin/ncu)
timeout 15 "$NCU" --query-metrics-collection pmsampling --chip gh100 >"$WORK/pm_metrics.txt" 2>&1
echo "ncu metric list done at ${SECONDS}s ($(wc -l <"$WORK/pm_metrics.txt") lines)"

one memory_bound memory_bound.py 1
one matmul_bf16 matmul_bf16.py 1
one memory_bound_pm_off memory_bound.py 0

"$PY" - "$WORK" "$OUT" <<'PY'
import json, os, re, statistics, sys
work, out = sys.argv[1], sys.argv[2]
summary, rows = {}, []
for name in ["memory_bound", "matmul_bf16", "memory_bound_pm_off"]:
    d = os.path.join(work, name)
    log = open(os.path.join(d, "log"), errors="replace").read() if os.path.exists(os.path.join(d, "log")) else ""
    wl = [json.loads(l) for l in log.splitlines() if l.startswith('{"workload"')]
    cs = []
    p = os.path.join(d, "counters.jsonl")
    if os.path.exists(p):
        cs = [json.loads(l) for l in open(p) if l.strip()]
    facts = []
    p = os.path.join(d, "facts.jsonl")
    if os.path.exists(p):
        facts = [json.loads(l) for l in open(p) if l.strip()]
    pm = [f["value"] for f in facts if f.get("key") == "pm_sampling"]
    rep = {}
    p = os.path.join(d, "report.json")
    if os.path.exists(p):
        try: rep = json.load(open(p))
        except Exception: pass
    def mean(k):
        v = [c[k] for c in cs if k in c]
        return round(statistics.mean(v), 1) if v else None
    passes = re.findall(r"PM sampling: pass \S+: .*?completed (\d+), kept (\d+)", log)
    s = {
        "rc": (re.findall(r"rc=(\d+)", log) or ["?"])[-1],
        "workload": wl[-1] if wl else None,
        "pm_fact": pm,
        "samples": len(cs),
        "decode_passes": len(passes),
        "passes_with_samples": sum(1 for c, k in passes if int(k) > 0),
        "mean_sm_active_pct": mean("sm_active_pct"),
        "mean_occupancy_pct": mean("occupancy_pct"),
        "mean_tensor_pct": mean("tensor_active_pct"),
        "mean_dram_pct": mean("dram_pct"),
        "top_finding": rep.get("top_finding"),
        "findings": [f.get("id") for f in rep.get("findings", [])],
        "pm_debug_lines": [l for l in log.splitlines() if "PM sampling" in l][:40],
    }
    summary[name] = s
    w = s["workload"] or {}
    rows.append((name, s["rc"], str(w.get("ms_per_kernel", w.get("tflops", "-"))), str(s["samples"]),
                 str(s["mean_sm_active_pct"]), str(s["mean_occupancy_pct"]), str(s["mean_tensor_pct"]),
                 str(s["mean_dram_pct"]), str(s["top_finding"]), (pm[0] if pm else "-")[:60]))
names = ["sm__cycles_active.avg", "sm__cycles_elapsed.avg", "sm__warps_active.avg", "dram__throughput",
         "gpu__dram_throughput", "dramc__read_throughput", "dramc__write_throughput", "dram__bytes",
         "sm__pipe_tensor_cycles_active", "sm__pipe_tensor_cycles_active_realtime",
         "sm__pipe_tensor_op_hmma_cycles_active", "sm__pipe_tensor_op_hmma_cycles_active_realtime",
         "tpc__warps_active_realtime", "tpc__warps_inactive_sm_active_realtime", "TriageCompute",
         "pcie__read_bytes", "pcie__write_bytes", "nvlrx__bytes", "nvltx__bytes", "nvlrx__bytes_packet"]
p = os.path.join(work, "pm_metrics.txt")
listing = open(p, errors="replace").read() if os.path.exists(p) else ""
summary["ncu_pmsampling_has"] = {n: (n in listing) for n in names}
summary["ncu_pmsampling_lines"] = {n: sum(n in l for l in listing.splitlines()) for n in names}
json.dump(summary, open(os.path.join(work, "summary.json"), "w"), indent=1)
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
hdr = ("run", "rc", "ms/kernel|TFLOPS", "samples", "sm%", "occ%", "tensor%", "dram%", "top", "pm_sampling")
w = [max(len(r[i]) for r in rows + [hdr]) for i in range(len(hdr))]
f = "  ".join("{:<%d}" % x for x in w)
txt = "\n".join([f.format(*hdr)] + [f.format(*r) for r in rows]) + "\n"
open(os.path.join(out, "table.txt"), "w").write(txt)
PY
tar -czf "$OUT/pm.tgz" -C "$WORK" . 2>/dev/null
rm -rf "$WORK"
echo "total ${SECONDS}s"
cat "$OUT/table.txt"
