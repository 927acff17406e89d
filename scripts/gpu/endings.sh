#!/usr/bin/env bash
# How jobs end, on the GPU (issue 36). Builds nothing: target/release/{gputrace,
# libgputrace.so} are carried. Every result is appended to $OUT/endings/summary.jsonl as
# soon as it is measured; a table last.
#   oom        scripts/workloads/endings/oom.py under `gputrace run`: keeps every step's
#              output until torch.cuda.OutOfMemoryError ends it with status 1; the report
#              must lead with the status and the failed cudaMalloc, top out_of_memory
#   kill_MODE  busy_loop.py (bf16 matmuls, GPU-bound) under `gputrace run`, the Python
#              process SIGKILLed after KILL_S (5) s; kernels in the trace against those
#              the job had completed (its progress lines) before the kill and 1 s before,
#              for MODE default (handover 500 ms), off (GPUTRACE_HANDOVER_MS=0) and
#              forced (GPUTRACE_HANDOVER_FORCED=1)
#   loader     loader_exit.py: DataLoader workers that end through os._exit; every trace
#              has an end record and the main one its kernels
#   ab         the handover's cost: scripts/gpu/overhead.sh, MODES="gputrace no_handover"
#              on the launch loop and ResNet-50 (AB_ROUNDS rounds, AB_BUDGET_S), last
#
#   OUT=/tmp/o scripts/gpu/endings.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/endings; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
W=$ROOT/scripts/workloads/endings
S=${SUMMARY:-$D/summary.jsonl}
KILL_S=${KILL_S:-5}
export PYTHONUNBUFFERED=1
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$D/gpu.txt" 2>&1

# Reports of a traces folder: text and JSON.
reports() {
  "$G" report "$1/traces" >"$1/report.txt" 2>&1
  "$G" report --json "$1/traces" >"$1/report.json" 2>>"$1/report.txt"
}

# One summary line from a case's report.json and extra key=value pairs.
summarize() {
  local name=$1 dir=$2; shift 2
  "$PY" - "$name" "$dir" "$@" <<'PYEOF' >>"$S"
import json, sys
name, d, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
out = {"case": name}
for kv in extra:
    k, _, v = kv.partition("=")
    try:
        out[k] = int(v)
    except ValueError:
        out[k] = v
try:
    r = json.load(open(d + "/report.json"))
    out["verdict"] = r.get("verdict", "")[:300]
    out["top_finding"] = r.get("top_finding")
    out["ended"] = [p.get("ended") for p in r.get("processes", [])]
    p0 = (r.get("processes") or [{}])[0]
    out["fatal_call"] = p0.get("fatal_call")
    out["failed_calls"] = [(c["call"], c["error"], c["count"]) for c in p0.get("failed_calls", [])]
    out["traces"] = len(r.get("processes", []))
except Exception as e:
    out["report_error"] = repr(e)
print(json.dumps(out))
PYEOF
}

# --- oom ---
C=$D/oom; mkdir -p "$C"
( cd "$C" && timeout 240 "$G" run -o "$C/traces" -- "$PY" "$W/oom.py" ) >"$C/run.log" 2>&1
rc=$?
reports "$C"
summarize oom "$C" rc=$rc last_step="$(grep -c '"step"' "$C/run.log")"

# --- kill_MODE ---
# Kernels in a trace that are the loop's matmuls (longer than 0.3 ms).
count_kernels() {
  for t in "$1"/traces/*.gtrace; do case $t in */gputrace-env-*) ;; *) "$G" dump "$t" ;; esac; done 2>/dev/null |
    "$PY" -c '
import json, sys
n = 0
for l in sys.stdin:
    if "\"kernel\"" in l:
        e = json.loads(l)
        if e.get("type") == "kernel" and e.get("dur_ns", 0) > 300000:
            n += 1
print(n)'
}
for mode in default off forced; do
  C=$D/kill_$mode; mkdir -p "$C"
  case $mode in
    default) ENVS=() ;;
    off) ENVS=(GPUTRACE_HANDOVER_MS=0) ;;
    forced) ENVS=(GPUTRACE_HANDOVER_FORCED=1) ;;
  esac
  ( cd "$C" && exec env "${ENVS[@]}" timeout 120 "$G" run -o "$C/traces" -- "$PY" "$W/busy_loop.py" ) >"$C/progress" 2>"$C/run.log" &
  runner=$!
  # The Python child of `gputrace run`, once it printed "ready".
  child=""
  for _ in $(seq 1 600); do
    grep -q '^ready' "$C/progress" 2>/dev/null && break
    sleep 0.1
  done
  for _ in $(seq 1 50); do
    g=$(pgrep -P "$runner" -f gputrace | head -1)
    [ -n "$g" ] && child=$(pgrep -P "$g" | head -1)
    [ -n "$child" ] && break
    sleep 0.1
  done
  sleep "$KILL_S"
  kill_ns=$("$PY" -c 'import time; print(time.clock_gettime_ns(time.CLOCK_MONOTONIC))')
  [ -n "$child" ] && kill -9 "$child"
  wait "$runner"; rc=$?
  reports "$C"
  recorded=$(count_kernels "$C")
  read -r done_at_kill done_1s_before < <("$PY" - "$C/progress" "$kill_ns" <<'PYEOF'
import sys
k = int(sys.argv[2]); a = b = 0
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) == 3 and f[0].isdigit():
        n, t = int(f[1]), int(f[2])
        if t <= k: a = n
        if t <= k - 1_000_000_000: b = n
print(a, b)
PYEOF
)
  summarize "kill_$mode" "$C" rc=$rc child="${child:-none}" kernels_recorded="$recorded" completed_before_kill="${done_at_kill:-0}" completed_1s_before="${done_1s_before:-0}"
done

# --- loader ---
C=$D/loader; mkdir -p "$C"
( cd "$C" && timeout 240 "$G" run -o "$C/traces" -- "$PY" "$W/loader_exit.py" ) >"$C/run.log" 2>&1
rc=$?
reports "$C"
summarize loader "$C" rc=$rc trace_files="$(ls "$C"/traces/*.gtrace 2>/dev/null | wc -l)"

# --- ab ---
if [ "${AB:-1}" = 1 ]; then
  OUT=$D MODES="gputrace no_handover" ONLY=${AB_ONLY:-launch,resnet50} ROUNDS=${AB_ROUNDS:-4} \
    BUDGET_S=${AB_BUDGET_S:-200} "$ROOT/scripts/gpu/overhead.sh" >"$D/ab.log" 2>&1
  tail -15 "$D/ab.log" >"$D/ab-table.txt"
fi

# Traces worth keeping, small enough to carry back.
tar -C "$D" -czf "$D/traces.tgz" oom/traces kill_default/traces kill_off/traces 2>/dev/null

"$PY" - "$S" <<'PYEOF' | tee "$D/table.txt"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    e = r.get("ended") or [{}]
    e0 = e[0] or {}
    extra = ""
    if r["case"].startswith("kill_"):
        extra = " kernels %s of %s completed (%s 1 s before the kill)" % (
            r.get("kernels_recorded"), r.get("completed_before_kill"), r.get("completed_1s_before"))
    if r["case"] == "loader":
        extra = " traces %s, ends %s" % (r.get("trace_files"), [x.get("detail") for x in e if x])
    print("%-13s rc=%s top=%s ended=%s%s | %s" % (
        r["case"], r.get("rc"), r.get("top_finding"), e0.get("detail"), extra, r.get("verdict", "")[:140]))
PYEOF
[ -f "$D/ab-table.txt" ] && cat "$D/ab-table.txt"
