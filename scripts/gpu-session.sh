#!/usr/bin/env bash
# One device call: the quick GPU validation, then overhead rounds until a time budget,
# then (if asked) the analyzer benchmark on the GPU host's CPU. Builds nothing: expects
# dist/{gputrace,libgputrace.so[,report-bench]} built and stripped on the CPU machine.
#   END_S=520 ROUNDS=10 VALIDATE=1 ANALYZER_BENCH=0 scripts/gpu-session.sh
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT" "$ROOT/target/release"
cp "$ROOT"/dist/gputrace "$ROOT"/dist/libgputrace.so "$ROOT/target/release/"
END_S=${END_S:-520}
if [ "${VALIDATE:-1}" = 1 ]; then
  QUICK=1 OUT="$OUT/validate" "$ROOT/scripts/gpu-validate.sh" >"$OUT/validate.txt" 2>&1
  echo "validation took ${SECONDS}s"
fi
if [ "${ANALYZER_BENCH:-0}" = 1 ] && [ -x "$ROOT/dist/report-bench" ]; then
  { nproc; grep -m1 "model name" /proc/cpuinfo; GPUTRACE_BENCH_REPS=3 taskset -c 10 "$ROOT/dist/report-bench"; } >"$OUT/analyzer-bench.txt" 2>&1
  echo "analyzer bench done at ${SECONDS}s"
fi
# Rounds of about 70 s each: stop starting them at END_S - 75 s of this call.
B=$(( END_S - 75 - SECONDS )); [ "$B" -lt 1 ] && B=1
ROUNDS=${ROUNDS:-10} BUDGET_S=$B OUT="$OUT/bench" "$ROOT/scripts/bench-overhead.sh"
echo "finished at ${SECONDS}s"
grep -A30 "^check" "$OUT/validate/log.txt" 2>/dev/null | tail -28
