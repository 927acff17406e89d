#!/usr/bin/env bash
# One device call: the quick GPU validation, the in-process window A/B, then overhead
# rounds until a time budget, then (if asked) the analyzer benchmark on the GPU host's CPU.
# Builds nothing: expects dist/{gputrace,libgputrace.so[,report-bench]} built and stripped
# on the CPU machine.
#   END_S=540 ROUNDS=10 VALIDATE=1 WINDOW_AB=launch ANALYZER_BENCH=0 scripts/gpu-session.sh
#   VALIDATE=0 WINDOW_AB=0 ONLY=launch LAUNCH_REPS=30 ROUND_S=25 scripts/gpu-session.sh
#   VALIDATE=0 BENCH=0 WINDOW_AB=mlp,resnet50 scripts/gpu-session.sh
# Everything bulky is packed into $OUT/session.tgz (the device returns at most 8 files);
# the summaries stay beside it: overhead.json, window_ab_<workload>.json, validate-table.txt.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT" "$ROOT/target/release"
cp "$ROOT"/dist/gputrace "$ROOT"/dist/libgputrace.so "$ROOT/target/release/"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
END_S=${END_S:-540}
CPUS=${CPUS:-2-9}
if [ "${VALIDATE:-1}" = 1 ]; then
  QUICK=1 OUT="$OUT/validate" "$ROOT/scripts/gpu-validate.sh" >"$OUT/validate.txt" 2>&1
  grep -A30 "^check" "$OUT/validate/log.txt" 2>/dev/null | tail -28 >"$OUT/validate-table.txt"
  echo "validation took ${SECONDS}s"
fi
# WINDOW_AB: the workloads of the in-process A/B (scripts/workloads/bench/window_ab.py), or 0.
WA=${WINDOW_AB:-launch}; [ "$WA" = 1 ] && WA=launch; [ "$WA" = 0 ] && WA=""
for wl in ${WA//,/ }; do
  GPUTRACE_MODE=dormant GPUTRACE_DIR=/tmp/window_ab/$wl LD_PRELOAD="$ROOT/target/release/libgputrace.so" \
    PYTHONUNBUFFERED=1 taskset -c "$CPUS" "$PY" "$ROOT/scripts/workloads/bench/window_ab.py" --workload "$wl" \
    --windows "${WINDOWS:-8}" ${WINDOW_ARGS:-} >"$OUT/window_ab_$wl.json" 2>"$OUT/window_ab_$wl.err"
  echo "window A/B $wl done at ${SECONDS}s: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("median ratio %.3f (fastest blocks %.3f) over %d windows, %d done" % (d["median_ratio"], d["median_ratio_min"], len(d["pairs"]), d["windows_done"]))' "$OUT/window_ab_$wl.json" 2>&1)"
done
if [ "${ANALYZER_BENCH:-0}" = 1 ] && [ -x "$ROOT/dist/report-bench" ]; then
  { nproc; grep -m1 "model name" /proc/cpuinfo; GPUTRACE_BENCH_REPS=3 taskset -c 10-13 "$ROOT/dist/report-bench"; } >"$OUT/analyzer-bench.txt" 2>&1
  echo "analyzer bench done at ${SECONDS}s"
fi
# Stop starting rounds ROUND_S (about one round's length) before END_S of this call.
ROUND_S=${ROUND_S:-75}
B=$(( END_S - ROUND_S - SECONDS )); [ "$B" -lt 1 ] && B=1
if [ "${BENCH:-1}" = 1 ]; then
  ROUNDS=${ROUNDS:-10} BUDGET_S=$B CPUS=$CPUS OUT="$OUT/bench" "$ROOT/scripts/bench-overhead.sh" | tee "$OUT/bench-table.txt"
  cp "$OUT/bench/overhead.json" "$OUT/overhead.json" 2>/dev/null
fi
# The validation's traces stay out of the pack when they would push it past the device's
# 16 MiB per file.
X=""; [ "$(stat -c %s "$OUT/validate/traces.tar.gz" 2>/dev/null || echo 0)" -gt 12000000 ] && X="--exclude=traces.tar.gz"
tar czf "$OUT/session.tgz" $X -C "$OUT" $(cd "$OUT" && ls -d validate bench window_ab_*.err validate.txt 2>/dev/null) \
  -C /tmp $(cd /tmp && ls -d window_ab 2>/dev/null) && rm -rf "$OUT/validate" "$OUT/bench" "$OUT"/window_ab_*.err "$OUT/validate.txt"
echo "finished at ${SECONDS}s"
cat "$OUT/validate-table.txt" 2>/dev/null
