#!/usr/bin/env bash
# What our CUPTI callbacks cost per launch, on the CPU with the fake CUDA of tests/fakes
# (no GPU): the fake runtime's cudaLaunchKernel makes the runtime ENTER/EXIT callbacks and
# the nested driver cuLaunchKernel ENTER/EXIT (skipped by us), and emits a kernel record,
# as CUPTI would. Three modes, interleaved, one process each per round:
#   untraced   no preload
#   floor      libgputrace.so preloaded, activity only (GPUTRACE_API=0
#              GPUTRACE_DRIVER_API=0 GPUTRACE_HOOKS=0 GPUTRACE_HOST=0 GPUTRACE_PYSTACK=0)
#   defaults   libgputrace.so preloaded, defaults
#   no_driver  defaults with GPUTRACE_DRIVER_API=0 (what the skipped nested driver
#              callbacks cost: defaults - no_driver)
# "callbacks" = defaults - floor, per launch: what the API callbacks add, from the
# fastest process of each mode (interference on a shared machine only adds time; the
# median of per-round differences is printed beside it). It is
# compared with bench/callbacks.json (the recorded figure and the target); the result
# is printed, never asserted (no timed assertion in tests). Builds the fakes with cc;
# uses target/release/libgputrace.so (built if missing).
#
#   scripts/bench-callbacks.sh            # 9 rounds of 200 000 launches
#   SHORT=1 scripts/bench-callbacks.sh    # 3 rounds of 20 000 (a smoke run)
#   RECORD=1 scripts/bench-callbacks.sh   # also writes the result into bench/callbacks.json
#
# Where valgrind is installed, the instructions executed inside our callback (callgrind,
# collecting only in api_callback and what it calls) per launch are counted too, for the
# defaults and for GPUTRACE_DRIVER_API=0: a figure this machine's noise does not move,
# for comparing two builds of the launch path (GPUTRACE_LIB=other.so).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${N:-200000}; ROUNDS=${ROUNDS:-9}
if [ -n "${SHORT:-}" ]; then N=20000; ROUNDS=3; fi
LIB=${GPUTRACE_LIB:-$ROOT/target/release/libgputrace.so}
[ -f "$LIB" ] || cargo build --release -p gputrace-interpose --manifest-path "$ROOT/Cargo.toml"
W=$(mktemp -d /tmp/gputrace-cbbench.XXXXXX)
trap 'rm -rf "$W"' EXIT
L=$W/site-packages/nvidia/cu13/lib; mkdir -p "$L"
CC=${CC:-cc}
F=$ROOT/tests/fakes
CF=(-std=gnu11 -O2 -I"$F")
"$CC" "${CF[@]}" -fPIC -shared -fvisibility=hidden -Wl,-soname,libcupti.so.13 -o "$L/libcupti.so.13" "$F/fake_cupti.c" -ldl -lpthread
"$CC" "${CF[@]}" -fPIC -shared -fvisibility=hidden -Wl,-soname,libcudart.so.13 -o "$L/libcudart.so.13" "$F/fake_cudart.c" -ldl -lpthread
"$CC" "${CF[@]}" -o "$W/app" "$F/app.c" -ldl -lpthread
FLOOR=(GPUTRACE_API=0 GPUTRACE_DRIVER_API=0 GPUTRACE_HOOKS=0 GPUTRACE_HOST=0 GPUTRACE_PYSTACK=0)
ENV=(env -u LD_PRELOAD -u CUDA_INJECTION64_PATH FAKE_CUDART="$L/libcudart.so.13" GPUTRACE_DIR="$W/traces")
mode() {  # MODE -> its settings and preload in M
  M=()
  case $1 in
    floor) M=("${FLOOR[@]}") ;;
    no_driver) M=(GPUTRACE_DRIVER_API=0) ;;
  esac
  [ "$1" = untraced ] || M+=(LD_PRELOAD="$LIB")
}
run() {  # MODE -> ns per launch
  mode "$1"
  "${ENV[@]}" "${M[@]}" "$W/app" launchloop "$N" 2>/dev/null | sed -n 's/.*launches, \([0-9.]*\) ns per launch/\1/p'
  rm -rf "$W/traces"
}
declare -A R
for r in $(seq 1 "$ROUNDS"); do
  for m in untraced floor defaults no_driver; do R[$m]+="$(run $m) "; done
done
# Instructions per launch in our callback, under callgrind (CG_N launches after the
# app's 1000 warm-up ones; totals of the collected part only).
CG=""
if command -v valgrind >/dev/null; then
  CG_N=${CG_N:-20000}
  for m in defaults no_driver; do
    mode "$m"
    "${ENV[@]}" "${M[@]}" valgrind --tool=callgrind --callgrind-out-file="$W/cg.$m" \
      --toggle-collect='*api_callback*' "$W/app" launchloop "$CG_N" >/dev/null 2>&1 || true
    ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$W/cg.$m" 2>/dev/null | head -1)
    CG+="$m=${ir:-0} "
    rm -rf "$W/traces"
  done
  CG+="launches=$((CG_N + 1000))"
fi
python3 - "$ROOT/bench/callbacks.json" "${R[untraced]}" "${R[floor]}" "${R[defaults]}" "${R[no_driver]}" "$N" "${RECORD:-}" "$CG" <<'PY'
import json, os, statistics as st, subprocess, sys
path, u, f, d, nd, n, record = sys.argv[1:8]
cg = dict(kv.split("=") for kv in sys.argv[8].split()) if len(sys.argv) > 8 and sys.argv[8] else {}
u, f, d, nd = ([float(x) for x in s.split()] for s in (u, f, d, nd))
if not (u and f and d and nd):
    sys.exit("bench-callbacks: a mode produced no figure")
pairs = [b - a for a, b in zip(f, d)]
r1 = lambda x: round(x, 1)
now = {"untraced_ns": r1(min(u)), "floor_ns": r1(min(f)), "defaults_ns": r1(min(d)),
       "no_driver_ns": r1(min(nd)), "callbacks_ns": r1(min(d) - min(f)),
       "nested_driver_skip_ns": r1(min(d) - min(nd)),
       "callbacks_paired_median_ns": r1(st.median(pairs)),
       "callbacks_paired_min_max_ns": [r1(min(pairs)), r1(max(pairs))],
       "rounds": len(pairs), "launches": int(n)}
if cg and int(cg.get("defaults", 0)) > 0:
    per = lambda m: round(int(cg[m]) / int(cg["launches"]), 1)
    now["callback_instructions_per_launch"] = {"defaults": per("defaults"), "no_driver": per("no_driver")}
rec = json.load(open(path)) if os.path.exists(path) else {}
before, target = rec.get("recorded", {}).get("callbacks_ns"), rec.get("target_callbacks_ns")
print("per launch (ns, fastest of %d rounds): untraced %.1f  floor %.1f  defaults %.1f  no_driver %.1f" % (
    len(pairs), now["untraced_ns"], now["floor_ns"], now["defaults_ns"], now["no_driver_ns"]))
print("nested driver callbacks (skipped): %.1f ns per launch" % now["nested_driver_skip_ns"])
print("our callbacks per launch: %.1f ns (per-round differences: median %.1f, %.1f - %.1f); recorded %s; target %s" % (
    now["callbacks_ns"], st.median(pairs), min(pairs), max(pairs),
    "%.1f" % before if before is not None else "-", "%.1f" % target if target is not None else "-"))
if "callback_instructions_per_launch" in now:
    i, was = now["callback_instructions_per_launch"], rec.get("recorded", {}).get("callback_instructions_per_launch")
    print("instructions in our callback per launch (callgrind): defaults %.1f, GPUTRACE_DRIVER_API=0 %.1f; recorded %s" % (
        i["defaults"], i["no_driver"], was if was else "-"))
if target is not None:
    print("target: %s" % ("met" if now["callbacks_ns"] <= target else "NOT met (a regression of the launch path?)"))
if record:
    try:
        now["commit"] = subprocess.run(["git", "-C", os.path.dirname(path), "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    rec["recorded"] = now
    json.dump(rec, open(path, "w"), indent=1)
    print("recorded in", path)
PY
