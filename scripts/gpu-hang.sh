#!/usr/bin/env bash
# Hangs and abnormal ends on the GPU machine: is every completed kernel in the trace, is
# the stuck kernel named, is the end recorded? Budget: at most 150 s of wall time.
# Builds nothing: carries target/release/{gputrace,libgputrace.so}, built on the CPU
# machine (cargo build --release -p gputrace-analyzer -p gputrace-interpose).
#
#   scripts/gpu-hang.sh        # results under $OUT/hang (default ./gpu-out/hang)
#
# The job (scripts/workloads/hang/hang_job.py) runs under LD_PRELOAD, so the signals go to
# the traced process itself. Cases, each appended to $OUT/hang/summary.jsonl as soon as
# measured (scripts/workloads/hang/hang_check.py says what each field is):
#  a. sigterm  300 steps, then a torch.cuda._sleep kernel of ten minutes, the host in
#              torch.cuda.synchronize(); SIGTERM 12 s after the spin began (about 25 s
#              after start): add kernels recorded vs launched, stall reports (default
#              GPUTRACE_STALL_MS, 5 s), the end reason, the exit status (143 expected);
#  b. sigkill  the same, SIGKILL 9 s after the spin began (after the first stall report);
#  c. abort    300 steps, 50 more launches, os.abort(): add kernels recorded vs launched
#              (the 50 in flight may be missing), exit status 134;
#  d. healthy  a 3-second _sleep kernel with GPUTRACE_STALL_MS=1000, so a forced flush
#              happens while it runs: is its kernel record complete in the trace (its
#              duration listed in sleep_kernels_recorded_s) or lost (only a stall op)?
#              This answers what CUPTI does with an incomplete record on a forced flush.
# Traces stay under $OUT/hang/<case>/ (one may become examples/stuck/).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
H=$OUT/hang; rm -rf "$H"; mkdir -p "$H"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
LIB=$ROOT/target/release/libgputrace.so
JOB=$ROOT/scripts/workloads/hang/hang_job.py
CHECK=$ROOT/scripts/workloads/hang/hang_check.py
export PYTHONUNBUFFERED=1
{ echo "gputrace: $("$G" --version 2>&1)"; nvidia-smi -L 2>/dev/null; } >"$H/env.txt"

# run CASE MODE SIGNAL AFTER_S [ENV...]: the job, SIGNAL sent AFTER_S after MARKER appears
# (none: let it end by itself), then the summary line.
run() {
  local case=$1 mode=$2 sig=$3 after=$4; shift 4
  local d=$H/$case; mkdir -p "$d/traces"
  echo "== $case at ${SECONDS}s" >&2
  env "$@" GPUTRACE_DIR="$d/traces" LD_PRELOAD="$LIB" \
    timeout -s KILL 60 "$PY" "$JOB" "$mode" 300 "$d/marker" >"$d/job.out" 2>"$d/job.err" &
  local pid=$! py=""
  if [ "$sig" != none ]; then
    for _ in $(seq 1 400); do [ -e "$d/marker" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    sleep "$after"
    # The python process itself (timeout's child), which the signal is for.
    py=$(cat /proc/$pid/task/$pid/children 2>/dev/null | awk '{print $1}')
    kill -s "$sig" "${py:-$pid}" 2>/dev/null
  fi
  wait $pid; local st=$?
  [ -n "$py" ] && kill -KILL "$py" 2>/dev/null
  local tr; tr=$(ls "$d"/traces/*.gtrace 2>/dev/null | grep -v /gputrace-env- | head -1)
  if [ -n "$tr" ]; then
    "$G" dump "$tr" 2>"$d/dump.err" | "$PY" "$CHECK" "$case" "$d/job.out" "$st" >>"$H/summary.jsonl"
    "$G" report "$tr" >"$d/report.txt" 2>&1
  else
    echo "{\"case\": \"$case\", \"status\": $st, \"trace\": null}" >>"$H/summary.jsonl"
  fi
}

run sigterm spin TERM 12
run sigkill spin KILL 9
run abort abort none 0
run healthy healthy none 0 GPUTRACE_STALL_MS=1000

echo "done at ${SECONDS}s" >&2
"$PY" - "$H/summary.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cols = ["case", "status", "add_launched", "add_recorded", "stall_reports", "stall_end_report",
        "stall_resolved", "sleep_kernels_recorded_s", "stall_op_names", "thread_calls", "end_reason"]
print(" | ".join(cols))
for r in rows:
    print(" | ".join(str(r.get(c)) for c in cols))
PYEOF
