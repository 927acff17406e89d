#!/usr/bin/env bash
# Tracing cost inside one process (scripts/workloads/bench/window_ab.py): a dormant
# process opens trace windows on itself, and the blocks timed inside each window are
# compared with the blocks timed just before it, in the same process. The process's
# placement on the machine (two clusters 40% apart between processes of the launch loop
# on the H200 host) is then out of the ratio. Modes, one process each per workload and
# round, in turn:
#   full    the defaults (target/release/libgputrace.so)
#   floor   the CUPTI floor: kernel records only
#   full_b  the defaults with the library LIB_B (another build)
#   no_driver    the defaults without the driver API callbacks (GPUTRACE_DRIVER_API=0)
#   no_samplers  the defaults without the host sampler and Python call sites
# Builds nothing. Results: $OUT/window-ab/<workload>_<mode>_<round>.json and a table.
#
#   WORKLOADS="launch gen" MODES="full floor full_b" LIB_B=... ROUNDS=1 WINDOWS=6 scripts/gpu/window-ab.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/window-ab; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
L=$ROOT/target/release/libgputrace.so
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
for r in $(seq 1 "${ROUNDS:-1}"); do
  for wl in ${WORKLOADS:-launch}; do
    for m in ${MODES:-full floor}; do
      E=""; lib=$L
      case $m in
        floor) E="GPUTRACE_API=0 GPUTRACE_DRIVER_API=0 GPUTRACE_HOOKS=0 GPUTRACE_HOST=0 GPUTRACE_PYSTACK=0" ;;
        no_driver) E="GPUTRACE_DRIVER_API=0" ;;
        no_samplers) E="GPUTRACE_HOST=0 GPUTRACE_PYSTACK=0" ;;
        full) ;;
        full_b) lib=${LIB_B:?full_b needs LIB_B} ;;
        *) echo "unknown mode $m"; exit 2 ;;
      esac
      f=$D/${wl}_${m}_$r.json
      # shellcheck disable=SC2086 # the mode's settings are words
      env $E GPUTRACE_MODE=dormant GPUTRACE_DIR=/tmp/wab/$wl$m$r LD_PRELOAD=$lib taskset -c "${CPUS:-2-9}" \
        "$PY" "$ROOT/scripts/workloads/bench/window_ab.py" --workload "$wl" --windows "${WINDOWS:-6}" --blocks "${BLOCKS:-12}" \
        >"$f" 2>>"$D/err.log"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%-24s median %.3f  fastest %.3f  range %.3f-%.3f  windows %d" % (sys.argv[1].split("/")[-1], d["median_ratio"], d["median_ratio_min"], d["min_max_ratio"][0], d["min_max_ratio"][1], d["windows_done"]))' "$f" 2>/dev/null || echo "$(basename "$f") failed (see err.log)"
    done
  done
done
