#!/usr/bin/env bash
# `gputrace run --hang-timeout` on the H200: a PyTorch loop stuck in a kernel that never
# ends (scripts/workloads/hang/hang_job.py in its `spin` mode: a ten-minute
# torch.cuda._sleep, i.e. `spin_kernel`, then torch.cuda.synchronize()) must get its hang
# report on stderr
# while it still runs, the job must be left running, and after we end it with SIGTERM the
# report must lead with the hang (the kernel, the launch and wait lines, the SIGTERM).
# Time budget: 150 s (one device call). Builds nothing: carries
# target/release/{gputrace,libgputrace.so}, built on the CPU machine
# (cargo build --release -p gputrace-analyzer -p gputrace-interpose).
#
#   scripts/gpu-hang-live.sh          # results under $OUT/hang-live (default ./gpu-out)
#   HANG_TIMEOUT=20 STEPS=300 scripts/gpu-hang-live.sh
#
# Output: $OUT/hang-live/summary.json (written as soon as each result is known), stderr.log
# (gputrace's and the job's stderr), report.txt, report.json; a short table last.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/hang-live; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
HANG_TIMEOUT=${HANG_TIMEOUT:-20}
WAIT_S=${WAIT_S:-90}        # longest wait for the live report
W=/tmp/hang-live; rm -rf "$W"; mkdir -p "$W"
WL=$ROOT/scripts/workloads/hang/hang_job.py
# The lines the report should name: the spin kernel's launch and the wait after it.
LAUNCH_LINE=$(grep -n 'torch.cuda._sleep(int(cycles_per_s \* 600))' "$WL" | head -1 | cut -d: -f1)
WAIT_LINE=$(awk -v l="$LAUNCH_LINE" 'NR > l && /torch.cuda.synchronize\(\)/ { print NR; exit }' "$WL")
summary() { # key=json-value pairs appended to summary.json (rewritten whole each time)
  for kv in "$@"; do echo "$kv" >>"$W/kv"; done
  "$PY" - "$W/kv" "$D/summary.json" <<'PYEOF'
import json, sys
d = {}
for line in open(sys.argv[1]):
    k, _, v = line.rstrip("\n").partition("=")
    try:
        d[k] = json.loads(v)
    except ValueError:
        d[k] = v
json.dump(d, open(sys.argv[2], "w"), indent=1)
PYEOF
}
summary "hang_timeout_s=$HANG_TIMEOUT" "launch_line=$LAUNCH_LINE" "wait_line=$WAIT_LINE"

start=$SECONDS
PYTHONUNBUFFERED=1 "$G" run --hang-timeout "$HANG_TIMEOUT" -o "$W/traces" -- \
  "$PY" "$WL" spin "${STEPS:-300}" "$W/marker" >"$W/stdout.txt" 2>"$D/stderr.log" &
GPID=$!
reported=false; after=null
while [ $(( SECONDS - start )) -lt "$WAIT_S" ]; do
  if grep -q '======== HANG in pid' "$D/stderr.log" 2>/dev/null; then
    reported=true; after=$(( SECONDS - start )); break
  fi
  kill -0 "$GPID" 2>/dev/null || break
  sleep 1
done
JPID=$(grep -m1 -o 'HANG in pid [0-9]*' "$D/stderr.log" | grep -o '[0-9]*$')
alive=false
if [ -n "$JPID" ] && kill -0 "$JPID" 2>/dev/null && ! grep -q ') Z ' "/proc/$JPID/stat" 2>/dev/null; then
  alive=true
fi
summary "reported_while_running=$reported" "report_after_s=$after" "job_alive_after_report=$alive"

# End it as a scheduler would: SIGTERM to gputrace, which passes it on; a job still there
# after 20 s is killed (its GPU work never ends).
kill -TERM "$GPID" 2>/dev/null
for _ in $(seq 20); do kill -0 "$GPID" 2>/dev/null || break; sleep 1; done
[ -n "$JPID" ] && kill -KILL "$JPID" 2>/dev/null
wait "$GPID"; code=$?
summary "gputrace_exit_code=$code" "live_reports=$(grep -c '======== HANG' "$D/stderr.log")"
cp "$W/stdout.txt" "$D/report.txt"
"$G" report --json "$W"/traces/*.gtrace >"$D/report.json" 2>>"$D/stderr.log"
"$PY" - "$D/report.json" "$LAUNCH_LINE" "$WAIT_LINE" >"$W/kv2" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
f = next((f for f in r["findings"] if f["id"] == "hang"), None)
h = (f or {}).get("hang") or {}
s = (f or {}).get("summary", "")
print("verdict=" + json.dumps(r["verdict"]))
print("hang_finding=" + json.dumps(f is not None))
print("hang_first=" + json.dumps(bool(r["findings"]) and r["findings"][0]["id"] == "hang"))
print("names_spin_kernel=" + json.dumps("spin_kernel" in s))
print("names_launch_line=" + json.dumps(f"hang_job.py:{sys.argv[2]}" in s))
print("names_wait_line=" + json.dumps(f"hang_job.py:{sys.argv[3]}" in s))
print("names_sigterm=" + json.dumps("SIGTERM" in s))
print("source=" + json.dumps(h.get("source")))
print("stuck_for_s=" + json.dumps(round(h.get("stuck_for_ns", 0) / 1e9, 2)))
PYEOF
mapfile -t KV <"$W/kv2"; summary "${KV[@]}"
tar -C "$W" -czf "$D/traces.tgz" traces 2>/dev/null
"$PY" - "$D/summary.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("reported_while_running", "report_after_s", "job_alive_after_report", "live_reports",
          "gputrace_exit_code", "hang_finding", "hang_first", "names_spin_kernel",
          "names_launch_line", "names_wait_line", "names_sigterm", "source", "stuck_for_s"):
    print("%-24s %s" % (k, json.dumps(d.get(k))))
print("verdict: " + str(d.get("verdict")))
PYEOF
