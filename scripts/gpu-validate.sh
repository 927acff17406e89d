#!/usr/bin/env bash
# GPU validation of gputrace, run on the GPU machine in one call. Builds nothing: it
# expects target/release/{gputrace,libgputrace.so} built on the CPU machine and carried.
#
#   scripts/gpu-validate.sh            # everything; results under $OUT (default ./gpu-out)
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
S="$ROOT/scripts/gpu"
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
T=$(ls "$W"/torch/*.gtrace | head -1)
"$G" summary --json "$T" >"$W/torch.summary.json" 2>>"$LOG"
say "torch mlp under torch.profiler (no gputrace)"
"$PY" "$S/torch_train.py" --steps 50 --profile "$W/prof.json" >"$W/prof.out" 2>>"$LOG"; cat "$W/prof.out" >>"$LOG"

# (b) JAX, (c) CuPy, (d) CUDA C++ built here.
say "jax";  "$G" run -o "$W/jax"  -- "$PY" "$S/jax_loop.py"  >"$W/jax.txt" 2>&1; echo "rc=$?" >>"$W/jax.txt"; cat "$W/jax.txt" >>"$LOG"
say "cupy"; "$G" run -o "$W/cupy" -- "$PY" "$S/cupy_loop.py" >"$W/cupy.txt" 2>&1; echo "rc=$?" >>"$W/cupy.txt"; cat "$W/cupy.txt" >>"$LOG"
say "cuda c++"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -O2 -o "$W/spin" "$S/spin.cu" >>"$LOG" 2>&1
"$G" run -o "$W/cpp" -- "$W/spin" >"$W/cpp.txt" 2>&1; echo "rc=$?" >>"$W/cpp.txt"; cat "$W/cpp.txt" >>"$LOG"

# (e) the program runs torch.profiler itself for steps 20..40.
say "torch with its own profiler window"
"$G" run -o "$W/window" -- "$PY" "$S/torch_train.py" --steps 60 --profile-window 20:40 --profile "$W/window_prof.json" >"$W/window.txt" 2>&1; echo "rc=$?" >>"$W/window.txt"; cat "$W/window.txt" >>"$LOG"

# (f) first overhead figure: interleaved untraced / traced, per-step medians.
say "overhead pairs"
for i in 1 2 3 4 5; do
  for wl in launch mlp; do
    "$PY" "$S/torch_train.py" --workload $wl --steps 30 >>"$W/ovh_${wl}_off.jsonl" 2>>"$LOG"
    GPUTRACE_DIR="$W/ovh" LD_PRELOAD="$ROOT/target/release/libgputrace.so" "$PY" "$S/torch_train.py" --workload $wl --steps 30 >>"$W/ovh_${wl}_on.jsonl" 2>>"$LOG"
  done
done

for d in torch jax cupy cpp window; do
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
ov = {}
for wl in ["launch", "mlp"]:
    def med(kind):
        v = [json.loads(l)["step_us_median"] for l in open(f"{W}/ovh_{wl}_{kind}.jsonl") if l.startswith("{")]
        return (stt.median(v) if v else None), v
    off, offv = med("off"); on, onv = med("on")
    ov[wl] = {"untraced_us": off, "traced_us": on, "ratio": (on / off if off and on else None), "untraced_all": offv, "traced_all": onv}
r["overhead"] = ov
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
    row(d + " kernels", [e.get("kernels") for e in r[d]])
row("window blind windows", [e.get("blind_windows") for e in r["window"]])
row("window profiler kernels", r.get("window_profiler_kernels"))
for wl, v in ov.items():
    row("overhead " + wl, "%s us -> %s us (x%s)" % (v["untraced_us"] and round(v["untraced_us"], 1), v["traced_us"] and round(v["traced_us"], 1), v["ratio"] and round(v["ratio"], 3)))
row("cupti - realtime (ns)", r["clock_cupti_minus_realtime_ns"])
PYEOF
cp "$T" "$OUT/torch-mlp.gtrace" 2>/dev/null
tar -czf "$OUT/traces.tar.gz" -C "$W" . 2>>"$LOG"
