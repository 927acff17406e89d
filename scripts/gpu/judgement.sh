#!/usr/bin/env bash
# Findings against what removing their cause gains, on the GPU (issue 38). Builds nothing:
# target/release/{gputrace,libgputrace.so} are carried. For each workload of
# scripts/workloads/judgement (a sync per layer, an unfused optimizer over many small
# parameters, a fixed-grid Triton kernel, batch-1 inference): the original traced under
# `gputrace run` (report text and JSON), then the original and its --fixed version untraced,
# alternating, REPS (2) pairs; the summary line has the top finding, its stake (% of the
# steady state) and the gain the fix measured (original median step less the fixed one, % of
# the original), and memory_headroom's severity where present. Appended to
# $OUT/judgement/summary.jsonl as measured; a table last.
#   OUT=/tmp/o scripts/gpu/judgement.sh          ONLY=fixed_grid,batch1_inference ...
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/judgement; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
W=$ROOT/scripts/workloads/judgement
S=${SUMMARY:-$D/summary.jsonl}
REPS=${REPS:-2}
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
for w in sync_per_layer unfused_optimizer fixed_grid batch1_inference; do
  case ",${ONLY:-$w}," in *",$w,"*) ;; *) continue ;; esac
  C=$D/$w; mkdir -p "$C"
  ( cd "$W" && timeout 150 "$G" run -o "$C/traces" -- "$PY" "$w.py" ) >"$C/traced.log" 2>&1
  rc=$?
  "$G" report "$C/traces" >"$C/report.txt" 2>&1
  "$G" report --json "$C/traces" >"$C/report.json" 2>>"$C/report.txt"
  : >"$C/untraced.jsonl"
  for _ in $(seq 1 "$REPS"); do
    ( cd "$W" && timeout 120 "$PY" "$w.py" ) 2>>"$C/untraced.err" | grep '^{' >>"$C/untraced.jsonl"
    ( cd "$W" && timeout 120 "$PY" "$w.py" --fixed ) 2>>"$C/untraced.err" | grep '^{' >>"$C/untraced.jsonl"
  done
  "$PY" - "$w" "$C" "$rc" <<'PYEOF' >>"$S"
import json, statistics, sys
w, d, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {"case": w, "rc": rc}
try:
    r = json.load(open(d + "/report.json"))
    fs = r.get("findings", [])
    top = fs[0] if fs else {}
    out["top_finding"] = r.get("top_finding")
    out["top_severity"] = top.get("severity")
    out["top_stake_pct"] = round(top.get("at_stake_pct", 0.0), 1)
    out["top_estimated"] = top.get("estimated")
    out["top_subcause"] = top.get("subcause")
    out["top_fix"] = (top.get("fix") or "")[:200]
    out["findings"] = [(f["id"], f["severity"], round(f.get("at_stake_pct", 0.0), 1)) for f in fs[:6]]
    mh = [f for f in fs if f["id"] == "memory_headroom"]
    out["memory_headroom"] = mh[0]["severity"] if mh else None
    out["verdict"] = r.get("verdict", "")[:300]
except Exception as e:
    out["report_error"] = repr(e)
steps = {"original": [], "fixed": []}
for l in open(d + "/untraced.jsonl"):
    try:
        e = json.loads(l)
        steps[e["variant"]].append(e["step_ms_median"])
    except Exception:
        pass
if steps["original"] and steps["fixed"]:
    o, f = statistics.median(steps["original"]), statistics.median(steps["fixed"])
    out["step_ms_original"], out["step_ms_fixed"] = o, f
    out["gain_pct"] = round(100 * (o - f) / o, 1)
print(json.dumps(out))
PYEOF
  tar -C "$C" -czf "$C/traces.tgz" traces 2>/dev/null
  rm -rf "$C/traces"
done
"$PY" - "$S" <<'PYEOF' | tee "$D/table.txt"
import json, sys
print("%-18s %-16s %-8s %7s %7s %9s %9s %s" % ("workload", "top", "sev", "stake%", "gain%", "orig ms", "fixed ms", "memory_headroom"))
for l in open(sys.argv[1]):
    r = json.loads(l)
    print("%-18s %-16s %-8s %7s %7s %9s %9s %s" % (r["case"], r.get("top_finding"), r.get("top_severity"),
          r.get("top_stake_pct"), r.get("gain_pct"), r.get("step_ms_original"), r.get("step_ms_fixed"),
          r.get("memory_headroom")))
PYEOF
