#!/usr/bin/env bash
# GPU validation of gputrace, run on the GPU machine in one call. Builds nothing: it
# expects target/release/{gputrace,libgputrace.so} built on the CPU machine and carried.
#
#   scripts/gpu-validate.sh            # everything; results under $OUT (default ./gpu-out)
#   QUICK=1 scripts/gpu-validate.sh    # PyTorch, profiler window, NCCL, copies, and a
#                                      # production window by --steps; no JAX/CuPy/C++/suite
#
# Writes $OUT/results.json (machine-readable), $OUT/log.txt, $OUT/traces.tar.gz (the
# traces and reports) and prints a short table last.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
W=/tmp/gv; rm -rf "$W"; mkdir -p "$W"
PY=${PY:-$(command -v python3)}
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G="$ROOT/target/release/gputrace"
S="$ROOT/scripts/workloads/validate"
LOG="$OUT/log.txt"; : > "$LOG"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
say() { echo "== $*" | tee -a "$LOG"; }
run() { echo "\$ $*" >>"$LOG"; "$@" >>"$LOG" 2>&1; }

say "machine"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; "$PY" -c 'import torch;print("torch",torch.__version__)'; } >>"$LOG" 2>&1

# (a) PyTorch training loop, traced, and the same loop under torch.profiler alone.
say "torch mlp traced"
"$G" run -o "$W/torch" -- "$PY" "$S/torch_train.py" --steps 50 >"$W/torch.out" 2>"$W/torch.err"; echo "rc=$?" >>"$LOG"
cat "$W/torch.out" "$W/torch.err" >>"$LOG"
# The process trace, not the environment file `gputrace run` writes beside it.
T=$(ls "$W"/torch/*.gtrace | grep -v "/gputrace-env-" | head -1)
"$G" summary --json "$T" >"$W/torch.summary.json" 2>>"$LOG"
say "torch mlp under torch.profiler (no gputrace)"
"$PY" "$S/torch_train.py" --steps 50 --profile "$W/prof.json" >"$W/prof.out" 2>>"$LOG"; cat "$W/prof.out" >>"$LOG"

QUICK=${QUICK:-0}
if [ "$QUICK" != 1 ]; then
# (b) JAX, (c) CuPy, (d) CUDA C++ built here.
say "jax";  "$G" run -o "$W/jax"  -- "$PY" "$S/jax_loop.py"  >"$W/jax.txt" 2>&1; echo "rc=$?" >>"$W/jax.txt"; cat "$W/jax.txt" >>"$LOG"
say "cupy"; "$G" run -o "$W/cupy" -- "$PY" "$S/cupy_loop.py" >"$W/cupy.txt" 2>&1; echo "rc=$?" >>"$W/cupy.txt"; cat "$W/cupy.txt" >>"$LOG"
say "cuda c++"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -O2 -o "$W/spin" "$S/spin.cu" >>"$LOG" 2>&1
"$G" run -o "$W/cpp" -- "$W/spin" >"$W/cpp.txt" 2>&1; echo "rc=$?" >>"$W/cpp.txt"; cat "$W/cpp.txt" >>"$LOG"

fi
# (e) the program runs torch.profiler itself for steps 20..40.
say "torch with its own profiler window"
"$G" run -o "$W/window" -- "$PY" "$S/torch_train.py" --steps 60 --profile-window 20:40 --profile "$W/window_prof.json" >"$W/window.txt" 2>&1; echo "rc=$?" >>"$W/window.txt"; cat "$W/window.txt" >>"$LOG"

# (f) interposition: single-rank NCCL, pageable and pinned copies.
say "nccl single rank"
"$G" run -o "$W/nccl" -- "$PY" "$S/nccl_single.py" >"$W/nccl.txt" 2>&1; echo "rc=$?" >>"$W/nccl.txt"; cat "$W/nccl.txt" >>"$LOG"
say "pageable and pinned copies"
"$G" run -o "$W/copies" -- "$PY" "$S/copies.py" >"$W/copies.txt" 2>&1; echo "rc=$?" >>"$W/copies.txt"; cat "$W/copies.txt" >>"$LOG"
for d in nccl copies; do for t in "$W/$d"/*.gtrace; do [ -f "$t" ] && "$G" dump "$t" >"$W/$d.dump.jsonl" 2>>"$LOG"; done; done

# (g) the pathology suite: each workload must get its finding, the healthy one none.
if [ -d "$ROOT/scripts/workloads/pathology" ] && [ "$QUICK" != 1 ]; then
  say "pathology suite"
  mkdir -p "$W/suite"
  for wl in "$ROOT"/scripts/workloads/pathology/*.py; do
    n=$(basename "$wl" .py); [ "$n" = check ] && continue
    timeout 120 "$G" run -o "$W/suite/$n" -- "$PY" "$wl" >"$W/suite/$n.out" 2>&1
    t=$(ls "$W/suite/$n"/*.gtrace 2>/dev/null | sort | tail -1)
    [ -n "$t" ] && "$G" report --json "$W/suite/$n"/*.gtrace >"$W/suite/$n.json" 2>>"$LOG" && "$G" report "$W/suite/$n"/*.gtrace >"$W/suite/$n.txt" 2>>"$LOG"
  done
  "$PY" "$ROOT/scripts/workloads/pathology/check.py" "$W/suite" --out "$W/suite/summary.json" 2>&1 | tee -a "$LOG" >"$W/suite/check.txt"
fi

# (h) production mode: a ~40 s job started dormant, a 5 s window in the middle.
say "production window"
GPUTRACE_MODE=dormant GPUTRACE_DIR="$W/prod" LD_PRELOAD="$ROOT/target/release/libgputrace.so" \
  "$PY" "$S/prod_job.py" "$([ "$QUICK" = 1 ] && echo 20 || echo 40)" "$W/prod_steps.jsonl" nvtx >"$W/prod.txt" 2>&1 &
JOB=$!
for i in $(seq 1 200); do grep -q stepping "$W/prod.txt" 2>/dev/null && break; sleep 0.2; done
sleep "$([ "$QUICK" = 1 ] && echo 6 || echo 15)"
A0=$(date +%s%N)
# Quick: a window of 100 NVTX step ranges; full: 5 seconds.
WIN="--duration 5s"; [ "$QUICK" = 1 ] && WIN="--steps 100"
"$G" attach "$JOB" $WIN >"$W/attach.txt" 2>&1; echo "rc=$?" >>"$W/attach.txt"
A1=$(date +%s%N)
echo "attach_wall_ns $A0 $A1" >>"$W/attach.txt"
wait $JOB; echo "job rc=$?" >>"$W/prod.txt"
cat "$W/attach.txt" "$W/prod.txt" >>"$LOG"
for t in "$W"/prod/*.gtrace; do [ -f "$t" ] && "$G" dump "$t" >"$W/prod.dump.jsonl" 2>>"$LOG" && "$G" report --json "$t" >"$W/prod.report.json" 2>>"$LOG"; done

for d in torch jax cupy cpp window nccl copies; do
  for t in "$W/$d"/*.gtrace; do [ -f "$t" ] && "$G" summary --json "$t" >"${t%.gtrace}.summary.json" 2>>"$LOG"; done
done
"$G" dump "$T" >"$W/torch.dump.jsonl" 2>>"$LOG"

"$PY" - "$W" "$OUT/results.json" <<'PYEOF' | tee -a "$LOG"
import json, sys, glob, statistics as stt
W, dst = sys.argv[1], sys.argv[2]
def sj(p):
    try:
        return json.load(open(p))
    except Exception as e:
        return None
def lastjson(p):
    try:
        for line in reversed(open(p).read().splitlines()):
            if line.startswith("{"):
                return json.loads(line)
    except Exception:
        pass
    return None
r = {}
s = sj(W + "/torch.summary.json")
prof = lastjson(W + "/prof.out")
if s:
    d = s[0]["devices"][0] if s[0]["devices"] else {}
    r["torch"] = {"kernels": d.get("kernels"), "kernel_ms": d.get("kernel_ns", 0) / 1e6,
                  "device": d.get("name"), "busy_pct": d.get("busy_pct"), "api_calls": s[0]["api_calls"],
                  "dropped": [s[0]["dropped_cupti"], s[0]["dropped_ring"], s[0]["dropped_buffers"]],
                  "cupti": s[0]["cupti"]}
if prof:
    r["torch_profiler"] = {"kernels": prof.get("profiler_kernels"), "kernel_ms": prof.get("profiler_kernel_us", 0) / 1e3}
if "torch" in r and "torch_profiler" in r:
    a, b = r["torch"], r["torch_profiler"]
    r["kernel_count_equal"] = a["kernels"] == b["kernels"]
    r["kernel_time_diff_pct"] = 100.0 * (a["kernel_ms"] - b["kernel_ms"]) / max(b["kernel_ms"], 1e-9)
for d in ["jax", "cupy", "cpp", "window"]:
    fs = glob.glob(f"{W}/{d}/*.summary.json")
    ent = []
    for f in fs:
        x = sj(f)
        if x and x[0]["devices"]:
            dv = x[0]["devices"][0]
            ent.append({"kernels": dv["kernels"], "kernel_ms": dv["kernel_ns"] / 1e6, "copies": {k: v["count"] for k, v in dv["copies"].items()},
                        "blind_windows": len(x[0]["blind_windows"]), "cmd": " ".join(x[0]["cmdline"])[-60:]})
        elif x:
            ent.append({"kernels": 0, "blind_windows": len(x[0]["blind_windows"])})
    r[d] = ent
wp = lastjson(W + "/window.txt")
if wp:
    r["window_profiler_kernels"] = wp.get("profiler_kernels")
def dump(p):
    try:
        return [json.loads(l) for l in open(p)]
    except Exception:
        return []
nc = [e for e in dump(W + "/nccl.dump.jsonl") if e["type"] == "nccl"]
r["nccl"] = {"calls": len(nc), "ops": sorted(set(e.get("op") for e in nc)), "bytes": sum(e.get("bytes", 0) for e in nc),
             "expected_bytes": (lastjson(W + "/nccl.txt") or {}).get("bytes")}
cp = dump(W + "/copies.dump.jsonl")
# The i-th host-to-device copy call (symbol hook, pinned-memory registry) against the
# i-th host-to-device copy CUPTI recorded: both in time order.
gpu = sorted((e for e in cp if e["type"] == "memcpy" and e.get("kind") == "HtoD"), key=lambda e: e["ts_ns"])
host = sorted((e for e in cp if e["type"] == "host_copy" and e.get("kind") == "HtoD"), key=lambda e: e["ts_ns"])
agree = sum(1 for g, h in zip(gpu, host) if g.get("host_memory") == h.get("host_memory"))
r["copies"] = {"cupti": {k: [e.get("host_memory") for e in gpu].count(k) for k in set(e.get("host_memory") for e in gpu)},
               "registry": {k: [e.get("host_memory") for e in host].count(k) for k in set(e.get("host_memory") for e in host)},
               "pairs": min(len(gpu), len(host)), "registry_agrees": agree, "registry_disagrees": min(len(gpu), len(host)) - agree}
try:
    r["suite"] = json.load(open(W + "/suite/summary.json"))
except Exception:
    r["suite"] = None
steps = [json.loads(l) for l in open(W + "/prod_steps.jsonl")] if glob.glob(W + "/prod_steps.jsonl") else []
pd = dump(W + "/prod.dump.jsonl")
st_ev = [e for e in pd if e["type"] == "state"]
if steps and st_ev:
    lo = min(e["ts_ns"] for e in st_ev if e["state"] == "tracing"); hi = max(e["ts_ns"] for e in st_ev if e["state"] == "stopped")
    before = [s["us"] for s in steps if s["t"] < lo - 1e9]
    during = [s["us"] for s in steps if lo <= s["t"] < hi]
    after = [s["us"] for s in steps if s["t"] > hi + 1e9]
    ks = [e for e in pd if e["type"] == "kernel"]
    att = open(W + "/attach.txt").read().split()
    a0 = int(att[att.index("attach_wall_ns") + 1]) if "attach_wall_ns" in att else None
    first = min((e["ts_ns"] for e in pd if e["type"] in ("kernel", "api") and e["ts_ns"] > 0), default=None)
    r["production"] = {"window_s": (hi - lo) / 1e9, "step_us_median": {"before": stt.median(before) if before else None,
        "during": stt.median(during) if during else None, "after": stt.median(after) if after else None},
        "steps": [len(before), len(during), len(after)], "kernels_in_trace": len(ks),
        "kernels_outside_window": sum(1 for e in ks if e["ts_ns"] < lo or e["ts_ns"] > hi),
        "window_start_after_attach_ms": (lo - a0) / 1e6 if a0 else None,
        "attach_to_first_event_ms": ((first - a0) / 1e6) if (first and a0) else None}
    rep = sj(W + "/prod.report.json")
    try:
        r["production"]["report_steps"] = rep["processes"][0]["steps"]["count"]
    except Exception:
        r["production"]["report_steps"] = None
dump = W + "/torch.dump.jsonl"
offs = []
try:
    for l in open(dump):
        e = json.loads(l)
        if e["type"] == "clock":
            offs.append(e["cupti_ns"] - e["real_ns"])
except Exception:
    pass
r["clock_cupti_minus_realtime_ns"] = [min(offs), max(offs)] if offs else None
json.dump(r, open(dst, "w"), indent=1)
print("\n%-28s %s" % ("check", "result"))
def row(k, v): print("%-28s %s" % (k, v))
if "torch" in r: row("torch kernels (gputrace)", r["torch"]["kernels"])
if "torch_profiler" in r: row("torch kernels (profiler)", r["torch_profiler"]["kernels"])
if "kernel_time_diff_pct" in r: row("kernel time diff %", "%.3f" % r["kernel_time_diff_pct"])
for d in ["jax", "cupy", "cpp", "window"]:
    row(d + " kernels", [e.get("kernels") for e in r.get(d, [])])
row("window blind windows", [e.get("blind_windows") for e in r.get("window", [])])
row("window profiler kernels", r.get("window_profiler_kernels"))
row("nccl calls / bytes", "%s / %s (expected all_reduce bytes %s)" % (r["nccl"]["calls"], r["nccl"]["bytes"], r["nccl"]["expected_bytes"]))
row("copies cupti / registry", "%s / %s" % (r["copies"]["cupti"], r["copies"]["registry"]))
row("registry agrees/disagrees", "%s / %s" % (r["copies"]["registry_agrees"], r["copies"]["registry_disagrees"]))
if r.get("production"):
    p = r["production"]; row("prod step us b/d/a", p["step_us_median"]); row("prod window s", round(p["window_s"], 3))
    row("prod kernels out of window", p["kernels_outside_window"]); row("attach->first event ms", p["attach_to_first_event_ms"])
    row("prod steps b/d/a (log)", p["steps"]); row("prod steps (report)", p.get("report_steps"))
row("cupti - realtime (ns)", r["clock_cupti_minus_realtime_ns"])
PYEOF
cp "$T" "$OUT/torch-mlp.gtrace" 2>/dev/null
tar -czf "$OUT/traces.tar.gz" --exclude='prof*.json' --exclude='*.dump.jsonl' --exclude=spin -C "$W" . 2>>"$LOG"
