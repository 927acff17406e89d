#!/usr/bin/env bash
# The session lifecycle and the settings table on the H200: a PyTorch loop traced from
# start to exit, two windows of a dormant one, one ended by SIGTERM, and an out-of-range
# setting. Each check: the job's exit status, kernels in its trace(s), the library's
# lines on stderr. Builds nothing (target/release/gputrace, target/release/libgputrace.so).
# Results in $OUT/pipeline/summary.jsonl as each is measured, a table last; about 2 min.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; D=$OUT/pipeline; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
LIB=$ROOT/target/release/libgputrace.so
TARGET=$ROOT/scripts/workloads/validate/attach_target.py
S=$D/summary.jsonl; : >"$S"
wait_for() { local i=0; while ! grep -q "$2" "$1" 2>/dev/null; do sleep 0.2; i=$((i+1)); if [ $i -gt $(( $3 * 5 )) ]; then return 1; fi; done; return 0; }
# Kernels recorded in every trace under a directory.
kernels() {
  local n=0 f k
  for f in $(find "$1" -name '*.gtrace' 2>/dev/null); do
    k=$("$G" dump "$f" 2>/dev/null | grep -c '"type":"kernel"')
    n=$((n + k))
  done
  echo $n
}
traces() { find "$1" -name '*.gtrace' 2>/dev/null | wc -l; }
row() { echo "$1" | tee -a "$S"; }

# 1. Traced from CUDA's start to exit (GPUTRACE_DEBUG=1: the sessions line).
name=trace; T=$D/$name-t; rm -rf "$T"
GPUTRACE_DEBUG=1 timeout 120 "$G" run -o "$T" -- "$PY" "$TARGET" "$D/$name.log" 8 torch \
  >"$D/$name.out" 2>"$D/$name.err"
rc=$?
sess=$(grep -c 'gputrace: sessions: cupti: ' "$D/$name.err")
row "{\"check\":\"$name\",\"rc\":$rc,\"traces\":$(traces "$T"),\"kernels\":$(kernels "$T"),\"steps\":$(grep -c '^step' "$D/$name.log"),\"sessions_line\":$sess}"

# 2. Dormant, two windows by attach, then the job runs on to its end.
name=windows; T=$D/$name-t; rm -rf "$T"
LD_PRELOAD=$LIB GPUTRACE_MODE=dormant GPUTRACE_DIR="$T" \
  "$PY" "$TARGET" "$D/$name.log" 14 torch >"$D/$name.out" 2>"$D/$name.err" &
pid=$!
arcs=""
if wait_for "$D/$name.log" ready 90; then
  for w in 1 2; do
    sleep 1
    timeout 40 "$G" attach $pid --duration 1500ms --no-report -o "$T" >>"$D/$name-attach.txt" 2>&1
    arcs="$arcs$?,"
  done
fi
wait $pid; rc=$?
row "{\"check\":\"$name\",\"rc\":$rc,\"attach_rcs\":\"$arcs\",\"traces\":$(traces "$T"),\"kernels\":$(kernels "$T")}"

# 3. SIGTERM while tracing: the job ends by the signal (143 from the shell), the trace
# is finished with its kernels.
name=sigterm; T=$D/$name-t; rm -rf "$T"
LD_PRELOAD=$LIB GPUTRACE_DIR="$T" "$PY" "$TARGET" "$D/$name.log" 30 torch \
  >"$D/$name.out" 2>"$D/$name.err" &
pid=$!
wait_for "$D/$name.log" ready 90 && sleep 3
kill -TERM $pid
wait $pid; rc=$?
row "{\"check\":\"$name\",\"rc\":$rc,\"traces\":$(traces "$T"),\"kernels\":$(kernels "$T")}"

# 4. An out-of-range setting: one warning naming the table's range, the default kept.
name=settings; T=$D/$name-t; rm -rf "$T"
LD_PRELOAD=$LIB GPUTRACE_DIR="$T" GPUTRACE_FLUSH_MS=5 GPUTRACE_STALL_MS=50 \
  timeout 120 "$PY" "$TARGET" "$D/$name.log" 4 torch >"$D/$name.out" 2>"$D/$name.err"
rc=$?
warn=$(grep -c 'GPUTRACE_FLUSH_MS="5" ignored (expected milliseconds between 10 and 1000)' "$D/$name.err")
warn2=$(grep -c 'GPUTRACE_STALL_MS="50" ignored (expected milliseconds between 100 and 3600000, or 0 (no watchdog))' "$D/$name.err")
row "{\"check\":\"$name\",\"rc\":$rc,\"flush_warning\":$warn,\"stall_warning\":$warn2,\"kernels\":$(kernels "$T")}"

echo "== session lifecycle and settings (pass: trace rc 0, kernels > 0, sessions_line 1;"
echo "   windows rc 0, attach_rcs 0,0, traces 2, kernels > 0; sigterm rc 143, kernels > 0;"
echo "   settings rc 0, both warnings 1, kernels > 0)"
cat "$S"
