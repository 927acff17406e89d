#!/usr/bin/env bash
# The whole run's phases, on the GPU (issue 37). Builds nothing: target/release/{gputrace,
# libgputrace.so} are carried. Each workload of scripts/workloads/phases (torch.compile
# recompiling every size, a loop with evaluation and checkpoints, a pause mid-run, JAX
# re-jitting, epochs whose DataLoader workers restart with steps of alternating shape) under
# `gputrace run`; the script prints the phases it timed itself ("mark" lines, CLOCK_REALTIME
# ns, the trace's clock). The summary line has, per kind, the report's
# time (processes[0].run.by_kind) beside the script's, the recompiles counted, the top
# finding and the verdict. Appended to $OUT/phases/summary.jsonl as measured; a table last.
# Each job's traces are kept as $OUT/phases/<job>/traces.tgz (with its marks), to analyse
# again here; the recompiling job's is for examples/.
#   OUT=/tmp/o scripts/gpu/phases.sh          ONLY=pause,eval_ckpt ...
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/phases; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
W=$ROOT/scripts/workloads/phases
S=${SUMMARY:-$D/summary.jsonl}
export PYTHONUNBUFFERED=1
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
for w in recompile eval_ckpt pause jax_rejit epochs; do
  case ",${ONLY:-$w}," in *",$w,"*) ;; *) continue ;; esac
  C=$D/$w; mkdir -p "$C"
  ( cd "$W" && timeout 180 "$G" run -o "$C/traces" -- "$PY" "$w.py" ) >"$C/marks.jsonl" 2>"$C/run.log"
  rc=$?
  "$G" report "$C/traces" >"$C/report.txt" 2>&1
  "$G" report --json "$C/traces" >"$C/report.json" 2>>"$C/report.txt"
  "$PY" - "$w" "$C" "$rc" <<'PYEOF' >>"$S"
import json, sys
w, d, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {"case": w, "rc": rc}
script = {}
for l in open(d + "/marks.jsonl"):
    try:
        e = json.loads(l)
        if "steps" in e:
            out["script_steps"] = e["steps"]
            continue
        script[e["mark"]] = script.get(e["mark"], 0) + (e["end"] - e["start"])
    except Exception:
        pass
out["script_s"] = {k: round(v / 1e9, 3) for k, v in script.items()}
try:
    r = json.load(open(d + "/report.json"))
    # The process that ran the workload: the one with the most GPU work.
    ps = r.get("processes", [])
    p = max(ps, key=lambda p: (p.get("kernels") or {}).get("count", 0) if isinstance(p.get("kernels"), dict) else 0) if ps else {}
    run = p.get("run") or {}
    out["report_s"] = {k["kind"]: round(k["ns"] / 1e9, 3) for k in run.get("by_kind", [])}
    out["span_s"] = round(run.get("span_ns", 0) / 1e9, 3)
    out["recompiles"] = run.get("recompiles")
    out["recompile_s"] = round(run.get("recompile_ns", 0) / 1e9, 3)
    out["compiler"] = run.get("compiler")
    out["phases"] = [(x["kind"], round(x["start_ns"] / 1e9, 2), round(x["end_ns"] / 1e9, 2)) for x in run.get("phases", [])][:60]
    out["top_finding"] = r.get("top_finding")
    out["verdict"] = r.get("verdict", "")[:400]
    out["processes"] = len(ps)
    names = {"start-up": "start_up", "compilation": "compilation", "loop": "loop",
             "evaluation": "evaluation", "checkpoint": "checkpoint", "pause": "pause",
             "epoch-boundary": "epoch_boundary"}
    st = p.get("steps") or {}
    out["steps"] = {k: st.get(k) for k in ("detected", "source", "count", "ops_per_step", "step_ns_median", "cv_pct")}
    out["error_pct"] = {}
    for k, v in script.items():
        rk = names.get(k)
        if rk and rk != "start_up" and v > 0:
            out["error_pct"][k] = round(100 * (out["report_s"].get(rk, 0) * 1e9 - v) / v, 1)
except Exception as e:
    out["report_error"] = repr(e)
print(json.dumps(out))
PYEOF
  tar -C "$C" -czf "$C/traces.tgz" traces marks.jsonl 2>/dev/null
  rm -rf "$C/traces"
done
"$PY" - "$S" <<'PYEOF' | tee "$D/table.txt"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print("%-10s rc=%s top=%s recompiles=%s error%%=%s" % (r["case"], r.get("rc"), r.get("top_finding"), r.get("recompiles"), r.get("error_pct")))
    print("           report %s" % r.get("report_s"))
    print("           script %s" % r.get("script_s"))
    if "script_steps" in r:
        print("           steps: script %s, report %s" % (r["script_steps"], (r.get("steps") or {}).get("count")))
PYEOF
