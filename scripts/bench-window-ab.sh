#!/usr/bin/env bash
# Tracing cost inside one process (scripts/workloads/bench/window_ab.py), gputrace's full recording
# and the CUPTI floor (kernel records only) in turn, on the GPU machine in one call.
# Builds nothing: carries dist/libgputrace.so.
#
#   WORKLOADS=launch ROUNDS=2 WINDOWS=6 scripts/bench-window-ab.sh   # $OUT/wab_<wl>_<mode>_<round>.json
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/bench-out}; mkdir -p "$OUT" "$ROOT/target/release"
[ -f "$ROOT/dist/libgputrace.so" ] && cp "$ROOT/dist/libgputrace.so" "$ROOT/target/release/"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
L=$ROOT/target/release/libgputrace.so
for r in $(seq 1 "${ROUNDS:-2}"); do
  for wl in ${WORKLOADS:-launch}; do
    for m in full floor; do
      E=""; [ $m = floor ] && E="GPUTRACE_ACTIVITY=kernel GPUTRACE_API=0 GPUTRACE_HOOKS=0"
      env $E GPUTRACE_MODE=dormant GPUTRACE_DIR=/tmp/wab/$wl$m$r LD_PRELOAD=$L taskset -c "${CPUS:-2-9}" \
        "$PY" "$ROOT/scripts/workloads/bench/window_ab.py" --workload "$wl" --windows "${WINDOWS:-6}" --blocks "${BLOCKS:-12}" \
        >"$OUT/wab_${wl}_${m}_$r.json" 2>>"$OUT/wab.err"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%-28s median %.3f  fastest %.3f  windows %d" % (sys.argv[1].split("/")[-1], d["median_ratio"], d["median_ratio_min"], d["windows_done"]))' "$OUT/wab_${wl}_${m}_$r.json"
    done
  done
done
