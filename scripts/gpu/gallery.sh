#!/usr/bin/env bash
# Real traces for the gallery (examples/, issue 43): pathology workloads whose finding no
# bundled example shows yet, each under `gputrace run`, and a window taken by attaching to a
# job started without the library. Builds nothing: target/release/{gputrace,libgputrace.so}
# are carried. Per workload: its traces, report.txt and report.json under $OUT/gallery/<w>/;
# all packed into $OUT/gallery.tgz by batch.sh. One summary line per workload appended to
# $SUMMARY as measured; a table last.
#   OUT=/tmp/o scripts/gpu/gallery.sh           ONLY=memory_bound,gil_holder
#   ONLY=dropped_records,blind_window,nvml_unavailable,no_host_api    (the environment findings)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/gallery; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
P=$ROOT/scripts/workloads/pathology
S=${SUMMARY:-$D/summary.jsonl}
export PYTHONUNBUFFERED=1
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
summ() { # NAME DIR RC
  "$PY" - "$1" "$2" "$3" <<'PYEOF' >>"$S"
import json, sys
w, d, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {"workload": w, "rc": rc}
try:
    r = json.load(open(d + "/report.json"))
    out["top_finding"] = r.get("top_finding")
    out["findings"] = [(f["id"], f["severity"], round(f["at_stake_pct"], 1)) for f in r.get("findings", [])][:6]
    out["verdict"] = r.get("verdict", "")[:300]
except Exception as e:
    out["error"] = repr(e)
print(json.dumps(out))
PYEOF
  tail -n 1 "$S"
}
# Then the environment findings, from the job's side only (the GPU's clocks, power,
# persistence and reset state are never touched); each one's settings come from
# expect.json's "env": dropped_records (env_dropped_records: a 1 MiB CUPTI buffer pool and a
# writer thread starved of CPU for 1.5 s), blind_window (env_blind_window: torch.profiler in
# the middle of the loop), nvml_unavailable (env_nvml_unavailable: GPUTRACE_NVML names a
# library that is not there), no_host_api (env_no_host_api: GPUTRACE_API=0). About 45 s.
for w in memory_bound gil_holder graph_train_step small_grid sync_memcpy empty_cache_loop io_bound_loader \
         dropped_records blind_window nvml_unavailable no_host_api; do
  case ",${ONLY:-$w}," in *",$w,"*) ;; *) continue ;; esac
  C=$D/$w; mkdir -p "$C"
  extra=$("$PY" -c 'import json,sys; e=json.load(open(sys.argv[1]))["workloads"].get(sys.argv[2],{}).get("env",{}); print(" ".join(k+"="+v for k,v in e.items()))' "$P/expect.json" "$w.py")
  ( cd "$P" && env $extra timeout 90 "$G" run -o "$C/traces" -- "$PY" "$w.py" ) >"$C/run.log" 2>&1
  rc=$?
  "$G" report "$C/traces" >"$C/report.txt" 2>&1
  "$G" report --json "$C/traces" >"$C/report.json" 2>>"$C/report.txt"
  summ "$w" "$C" "$rc"
done
# A window by attaching: a PyTorch loop started without the library, 3 s traced.
w=attach_window
case ",${ONLY:-$w}," in *",$w,"*)
  C=$D/$w; mkdir -p "$C"
  L=$C/target.log; : >"$L"
  ( unset LD_PRELOAD; "$PY" "$ROOT/scripts/workloads/validate/attach_target.py" "$L" 40 torch >"$C/target.out" 2>&1 ) &
  tp=$!
  for _ in $(seq 1 300); do grep -q ready "$L" 2>/dev/null && break; sleep 0.2; done
  pid=$(pgrep -f "attach_target.py $L" | head -1)
  timeout 60 "$G" attach "$pid" --duration 3s -o "$C/traces" --no-report >"$C/run.log" 2>&1
  rc=$?
  kill "$tp" 2>/dev/null; pkill -f "attach_target.py $L" 2>/dev/null; wait "$tp" 2>/dev/null
  "$G" report "$C/traces" >"$C/report.txt" 2>&1
  "$G" report --json "$C/traces" >"$C/report.json" 2>>"$C/report.txt"
  summ "$w" "$C" "$rc"
;; esac
"$PY" - "$S" <<'PYEOF' | tee "$D/table.txt"
import json, sys
print(f"{'workload':18} {'rc':>4}  {'top':22} findings")
for l in open(sys.argv[1]):
    e = json.loads(l)
    fs = ", ".join(f"{i} {s} {p}%" for i, s, p in e.get("findings", []))
    print(f"{e['workload']:18} {e['rc']:>4}  {str(e.get('top_finding')):22} {fs[:90]}")
PYEOF
