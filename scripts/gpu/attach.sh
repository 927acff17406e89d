#!/usr/bin/env bash
# `gputrace attach` on jobs started without the library (no LD_PRELOAD): the library is
# loaded through ptrace, a window traced, the job left running. Builds nothing: uses
# target/release/{gputrace,libgputrace.so}. Results in $OUT/attach/ (summary.jsonl,
# appended as measured), a table last.
#   1. a PyTorch MLP loop: an attach while torch.profiler holds CUPTI (must be refused
#      cleanly), then a 5 s window (kernels per step against torch.profiler's count in
#      the same process), step time before the load and after the window, 50 short
#      windows;
#   2. the same on a JAX loop (a 3 s window, 20 short windows).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; D=$OUT/attach; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
S=$D/summary.jsonl
unset LD_PRELOAD
note() { echo "$*" | tee -a "$D/log.txt"; }
wait_for() { # FILE PATTERN SECONDS
  local i=0
  while ! grep -q "$2" "$1" 2>/dev/null; do
    sleep 0.2; i=$((i+1))
    if [ $i -gt $(( $3 * 5 )) ]; then return 1; fi
  done
  return 0
}

for kind in torch jax; do
  L=$D/$kind.log; : >"$L"
  secs=50; [ $kind = jax ] && secs=35
  "$PY" "$ROOT/scripts/workloads/validate/attach_target.py" "$L" $secs $kind >"$D/$kind.out" 2>&1 &
  pid=$!
  wait_for "$L" ready 120 || { note "$kind: the target never got ready"; kill $pid; continue; }
  sleep 8   # steps before the load
  t0=$(date +%s%N)
  timeout 60 "$G" attach $pid --duration 5s -o "$D/$kind-win" >"$D/$kind-attach.txt" 2>&1
  rc=$?; t1=$(date +%s%N)
  note "$kind: 5 s window rc=$rc in $(( (t1 - t0) / 1000000 )) ms: $(grep -m1 'loaded libgputrace' "$D/$kind-attach.txt")"
  tr=$(ls "$D/$kind-win"/*.gtrace 2>/dev/null | grep -v /gputrace-env- | head -1)
  if [ -n "$tr" ]; then
    "$G" dump "$tr" >"$D/$kind-dump.jsonl" 2>/dev/null
    "$G" report "$tr" >"$D/$kind-report.txt" 2>&1
  fi
  sleep 6   # steps after the window
  n=50; [ $kind = jax ] && n=20
  ok=0; worst=0
  for i in $(seq 1 $n); do
    a=$(date +%s%N)
    timeout 30 "$G" attach $pid --duration 100ms --no-report -o "$D/$kind-cycles" >>"$D/$kind-cycles.txt" 2>&1 && ok=$((ok+1))
    b=$(( ($(date +%s%N) - a) / 1000000 )); [ $b -gt $worst ] && worst=$b
  done
  rm -rf "$D/$kind-cycles"
  note "$kind: $ok of $n short windows ok, the slowest attach took $worst ms"
  echo "{\"kind\":\"$kind\",\"check\":\"cycles\",\"ok\":$ok,\"of\":$n,\"slowest_ms\":$worst}" >>"$S"
  if [ $kind = torch ]; then
    touch "$L.profile"
    wait_for "$L" profiling 60 && sleep 0.5
    timeout 60 "$G" attach $pid --duration 1s --no-report -o "$D/$kind-busy" >"$D/$kind-busy.txt" 2>&1
    rc=$?
    note "$kind: attach while torch.profiler holds CUPTI: rc=$rc: $(tr '\n' ' ' <"$D/$kind-busy.txt" | cut -c1-400)"
    echo "{\"kind\":\"$kind\",\"check\":\"busy_cupti\",\"rc\":$rc}" >>"$S"
    wait_for "$L" "^profiler" 60
    note "$kind: $(grep '^profiler' "$L")"
    sleep 2
    timeout 60 "$G" attach $pid --duration 1s --no-report -o "$D/$kind-after" >"$D/$kind-after.txt" 2>&1
    note "$kind: attach after torch.profiler ended: rc=$?: $(tr '\n' ' ' <"$D/$kind-after.txt" | cut -c1-300)"
  fi
  wait $pid; rc=$?
  note "$kind: the target exited $rc: $(tail -1 "$D/$kind.out")"
  if [ -s "$D/$kind-dump.jsonl" ]; then
    "$PY" - "$D/$kind-dump.jsonl" "$L" "$kind" "$t0" "$t1" "$rc" <<'PYEOF' >>"$S"
import json, sys, statistics as st
dump, log, kind, t0, t1, rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
ks = []
for l in open(dump):
    try:
        e = json.loads(l)
    except Exception:
        continue
    if e.get("type") == "kernel":
        ks.append(int(e.get("ts_ns", 0)))
prof = None; steps = []
for l in open(log):
    f = l.split()
    if f and f[0] == "profiler":
        prof = int(f[1]) / int(f[2])
    if f and f[0] == "step":
        steps.append((int(f[2]), int(f[3])))
lo, hi = (min(ks), max(ks)) if ks else (0, 0)
inside = [(a, b) for a, b in steps if a >= lo and b <= hi]
per = [sum(1 for k in ks if a <= k <= b) for a, b in inside]
pre = [b - a for a, b in steps if b < t0][-200:]
post = [b - a for a, b in steps if a > t1][:200]
out = {"kind": kind, "check": "window", "rc": rc, "kernels": len(ks), "steps_inside": len(inside),
       "kernels_per_step_median": st.median(per) if per else None,
       "profiler_kernels_per_step": prof,
       "ratio_to_profiler": (st.median(per) / prof) if (per and prof) else None,
       "step_ms_before_median": st.median(pre) / 1e6 if pre else None,
       "step_ms_after_median": st.median(post) / 1e6 if post else None}
if pre and post:
    out["after_over_before"] = st.median(post) / st.median(pre)
print(json.dumps(out))
PYEOF
    tail -1 "$S" | tee -a "$D/log.txt"
  fi
  echo "{\"kind\":\"$kind\",\"check\":\"target_exit\",\"rc\":$rc}" >>"$S"
done
echo "== attach without the preload"
cat "$D/log.txt"
