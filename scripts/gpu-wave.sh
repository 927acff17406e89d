#!/usr/bin/env bash
# The GPU checks of the host, environment, damage and packaging work, in two device calls
# that build nothing: target/release/{gputrace,libgputrace.so} are built on the CPU machine
# and carried, the wheel in .whl-gputrace/ (scripts/wheel.sh build).
#
#   PART=a scripts/gpu-wave.sh   # ~9 min: the whole pathology suite under `gputrace run`
#                                #  (host sub-causes, shared GPU, the old findings) checked
#                                #  against expect.json; gputrace doctor; a job killed with
#                                #  SIGKILL (kernels run vs recorded); the wheel installed
#                                #  and used; traces for examples/
#   PART=b scripts/gpu-wave.sh   # ~9 min: quick validation of this build (kernel count
#                                #  against torch.profiler, NCCL, copies, a production
#                                #  window); the samplers' cost, interleaved A/B: host
#                                #  sampler on/off (launch loop, MLP step), NVML sampler
#                                #  on/off (MLP step)
#   PART=c scripts/gpu-wave.sh   # ~8 min: the host and call-site workloads (SUITE, default
#                                #  below) with NVML sampled by `gputrace run` from outside
#                                #  the job; the wheel; the pageable/pinned pair for diff;
#                                #  A/Bs (AB_PAIRS each, interleaved): host sampler on/off,
#                                #  Python call sites on/off; traces for examples/
#   PART=d scripts/gpu-wave.sh   # ~5 min: the bundled example (scripts/workloads/example/
#                                #  train.py) recorded without and with PM sampling; the
#                                #  wheel; scripts/gpu-pm.sh where present; host sampler A/B
#   PART=e scripts/gpu-wave.sh   # ~8 min: what run 7 left: PM sampling (scripts/gpu-pm.sh)
#                                #  with the start fix, the stack-sample workloads checked
#                                #  for host_in/site (16-frame stacks), the example
#                                #  re-recorded with PM on, A/Bs of call sites, stack
#                                #  samples and PM on the MLP and ResNet-50 steps
#   PART=f scripts/gpu-wave.sh   # ~9 min: hangs and abnormal ends (scripts/gpu-hang.sh: a
#                                #  stuck kernel ended by SIGTERM, SIGKILL, os.abort(), the
#                                #  forced flush on a long healthy kernel; gpu-hang-live.sh:
#                                #  gputrace run --hang-timeout reporting while the job hangs),
#                                #  the bundled example re-recorded (with GPM samples); A/B of
#                                #  the stall watchdog and signal handlers on/off.
#                                #  PARTS="gpm:200 ..." adds scripts/gpu-gpm.sh
#   PART=g scripts/gpu-wave.sh   # the checks under scripts/gpu/ (PARTS="graphs:150
#                                #  contention:200 overhead:240": each NAME:LIMIT_S runs
#                                #  scripts/gpu/NAME.sh with OUT=$W, its table into
#                                #  wave-g.txt, its folder packed as wave-g-NAME.tgz); then,
#                                #  with EXAMPLE=1, the bundled example re-recorded
# Everything bulky goes into $OUT/wave-<part>.tgz (the device returns at most 8 files);
# $OUT/wave-<part>.txt is the short table, printed last.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
PART=${PART:-a}
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
LIB=$ROOT/target/release/libgputrace.so
W=/tmp/wave-$PART; rm -rf "$W"; mkdir -p "$W"
T=$OUT/wave-$PART.txt
{ echo "wave $PART on $(hostname), $(date -u +%FT%TZ)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$G" --version; } >"$T" 2>&1

# Interleaved A/Bs of settings: settings_ab STEPS PAIRS END_S "VAR=on:off ...". Per round
# and setting, one process with each value, the order alternating round to round, CPUs
# 2-9, bench_workload.py's STEPS; no new round after END_S seconds. Appends the per-step
# on/off ratios (median, range, each pair) to $W/ab.txt.
settings_ab() {
  local steps=$1 pairs=$2 end_s=$3 ab var vals mode v r
  local B="$ROOT/scripts/workloads/bench/bench_workload.py --only $steps --launch-reps ${LAUNCH_REPS:-30}"
  mkdir -p "$W/ab"
  for r in $(seq 1 "$pairs"); do
    [ $SECONDS -gt "$end_s" ] && break
    for ab in $4; do
      var=${ab%%=*}; vals=${ab#*=}
      for mode in $([ $((r % 2)) = 1 ] && echo "on off" || echo "off on"); do
        if [ $mode = on ]; then v=${vals%%:*}; else v=${vals#*:}; fi
        # shellcheck disable=SC2086 # B is a command line
        env GPUTRACE_DIR="$W/ab/t" "$var=$v" LD_PRELOAD="$LIB" taskset -c 2-9 "$PY" $B >>"$W/ab/$var-$mode.jsonl" 2>>"$W/ab/err.log"
        rm -rf "$W/ab/t"
      done
    done
  done
  for ab in $4; do
    var=${ab%%=*}
    "$PY" - "$W/ab/$var-on.jsonl" "$W/ab/$var-off.jsonl" "$var" <<'EOF2' >>"$W/ab.txt" 2>&1
import json, statistics as st, sys
on = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
off = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
n = min(len(on), len(off))
for k in ("launch_us", "mlp_us", "resnet50_us"):
    r = [on[i][k] / off[i][k] for i in range(n) if k in on[i] and k in off[i] and off[i][k] > 0]
    if r:
        print("%s %-11s on/off median ratio %.4f (min %.4f, max %.4f) over %d pairs: %s" % (
            sys.argv[3], k, st.median(r), min(r), max(r), len(r), " ".join("%.4f" % x for x in r)))
EOF2
  done
}

if [ "$PART" = a ]; then
  # 1. The pathology suite, every workload (the host script's suite part, no A/B).
  SUITE=all AB_ROUNDS_MAX=0 END_S=400 OUT="$W/suite" "$ROOT/scripts/gpu-host-check.sh" >"$W/suite.log" 2>&1
  { echo; echo "== pathology suite"; sed -n '/== pathology/,/== sampler on vs off/p' "$W/suite/host-check.txt"; } >>"$T"
  cp "$W/suite/summary.json" "$OUT/suite-summary.json" 2>/dev/null
  echo "suite done at ${SECONDS}s"

  # 2. The environment checklist with no job running.
  "$G" doctor >"$W/doctor.txt" 2>&1; "$G" doctor --json >"$W/doctor.json" 2>>"$W/doctor.txt"
  { echo; echo "== gputrace doctor"; cat "$W/doctor.txt"; } >>"$T"

  # 3. SIGKILL mid-run: kernels that ran (the job's own count, synchronised every 500)
  #    against kernels in the cut-short trace. Three kills at different times.
  for k in 4 6 8; do
    d=$W/kill-$k; mkdir -p "$d"
    GPUTRACE_DIR=$d/traces LD_PRELOAD=$LIB "$PY" "$ROOT/scripts/workloads/validate/kill_job.py" "$d/count" >"$d/log" 2>&1 &
    pid=$!
    sleep "$k"; kill -KILL "$pid"; wait "$pid" 2>/dev/null
    killed_ns=$(date +%s%N)
    tr=$(ls "$d"/traces/*.gtrace | head -1)
    "$G" summary --json "$tr" >"$d/summary.json" 2>"$d/summary.err"
    "$G" report "$tr" >"$d/report.txt" 2>&1
    "$PY" - "$d" "$k" "$killed_ns" <<'EOF' >>"$W/kill.txt"
import json, sys
d, k, killed = sys.argv[1], sys.argv[2], int(sys.argv[3])
n, at = open(d + "/count").read().split()[:2]
s = json.load(open(d + "/summary.json"))
s = s[0] if isinstance(s, list) else s
def find(o, key):
    if isinstance(o, dict):
        for kk, v in o.items():
            if kk == key:
                return v
            r = find(v, key)
            if r is not None:
                return r
    if isinstance(o, list):
        for v in o:
            r = find(v, key)
            if r is not None:
                return r
kern = find(s, "kernels")
kern = kern if isinstance(kern, int) else (kern.get("count") if isinstance(kern, dict) else kern)
err = open(d + "/summary.err").read().strip().replace("\n", " | ")
print(f"kill after {k} s: {n} add_ kernels ran by the last count ({(killed - int(at)) / 1e6:.0f} ms before the kill); "
      f"trace holds {kern} kernels (1 of them the zeros fill); reader: {err[:300]}")
EOF
  done
  { echo; echo "== SIGKILL mid-run"; cat "$W/kill.txt"; } >>"$T"
  echo "kill done at ${SECONDS}s"

  # 4. The wheel, installed with pip --no-index and used on a PyTorch job.
  OUT="$W/wheel" "$ROOT/scripts/wheel-gpu-check.sh" "$ROOT/.whl-gputrace" >"$W/wheel.log" 2>&1
  echo "wheel check rc=$?" >>"$W/wheel.log"
  { echo; echo "== wheel"; tail -15 "$W/wheel.log"; } >>"$T"

  # 5. Before/after pair for `gputrace diff` (diffed on the CPU machine): pageable copies,
  #    then the fix (pinned batch, non_blocking copy).
  for n in pathology/pageable_memcpy fixed/pageable_memcpy_fixed; do
    b=$(basename "$n")
    ( cd "$W" && timeout 90 "$G" run -o "$W/diff/$b" -- "$PY" "$ROOT/scripts/workloads/$n.py" ) >"$W/diff-$b.log" 2>&1
  done
  mkdir -p "$W/examples"; cp "$W"/suite/examples/*.gtrace "$W/examples/" 2>/dev/null
  for n in shared_gpu empty_cache_loop batch1_training implicit_sync; do
    f=$(ls /tmp/host-check/suite/traces-$n/*.gtrace 2>/dev/null | head -1)
    [ -n "$f" ] && cp "$f" "$W/examples/$n.gtrace"
  done
  tar czf "$OUT/wave-a.tgz" -C "$W" suite.log suite doctor.txt doctor.json kill.txt $(cd "$W" && ls -d kill-* wheel wheel.log diff diff-*.log examples 2>/dev/null)
fi

if [ "$PART" = b ]; then
  QUICK=1 OUT="$W/validate" "$ROOT/scripts/gpu-validate.sh" >"$W/validate.txt" 2>&1
  { echo; echo "== quick validation"; grep -A30 "^check" "$W/validate/log.txt" 2>/dev/null | tail -28; } >>"$T"
  echo "validation done at ${SECONDS}s"
  # NVML sampler on/off (the environment script's A/B part only: doctor and the shared
  # workload ran in part a).
  AB_ONLY=1 ROUNDS=${ENV_ROUNDS:-6} AB_SECONDS=4 OUT="$W/env" "$ROOT/scripts/gpu-env.sh" >"$W/env.log" 2>&1
  { echo; echo "== NVML sampler on/off"; tail -3 "$W/env.log"; } >>"$T"
  cp "$W/env/summary.json" "$OUT/env-summary.json" 2>/dev/null
  echo "env A/B done at ${SECONDS}s"
  # Host sampler on/off with the rest of the call (the suite part: the launch loop only).
  SUITE=launch_bound AB_ROUNDS_MAX=40 END_S=$(( 560 - SECONDS )) OUT="$W/host" "$ROOT/scripts/gpu-host-check.sh" >"$W/host.log" 2>&1
  { echo; echo "== host sampler on/off"; sed -n '/== sampler on vs off/,$p' "$W/host/host-check.txt"; } >>"$T"
  cp "$W/host/host_ab.json" "$OUT/host-ab.json" 2>/dev/null
  tar czf "$OUT/wave-b.tgz" -C "$W" validate.txt validate env env.log host host.log 2>/dev/null
fi
if [ "$PART" = c ]; then
  SUITE=${SUITE:-data_starvation,batch1_training,generation_loop,workers_saturated,shared_gpu,empty_cache_loop,implicit_sync,sync_memcpy,pageable_memcpy}
  SUITE=$SUITE AB_ROUNDS_MAX=0 OUT="$W/suite" timeout 330 "$ROOT/scripts/gpu-host-check.sh" >"$W/suite.log" 2>&1
  { echo; echo "== pathology suite ($SUITE)"; sed -n '/== pathology/,/== sampler on vs off/p' "$W/suite/host-check.txt"; } >>"$T"
  cp "$W/suite/summary.json" "$OUT/suite-summary.json" 2>/dev/null
  ls /tmp/host-check/suite/traces-shared_gpu/ >>"$W/suite.log" 2>&1
  echo "suite done at ${SECONDS}s" | tee -a "$T"
  mkdir -p "$W/examples"
  for n in workers_saturated shared_gpu implicit_sync data_starvation; do
    d=/tmp/host-check/suite/traces-$n
    [ -d "$d" ] && mkdir -p "$W/examples/$n" && cp "$d"/*.gtrace "$W/examples/$n/" 2>/dev/null
  done
  if [ -d "$ROOT/.whl-gputrace" ]; then
    OUT="$W/wheel" timeout 120 "$ROOT/scripts/wheel-gpu-check.sh" "$ROOT/.whl-gputrace" >"$W/wheel.log" 2>&1
    echo "wheel check rc=$?" >>"$W/wheel.log"
    { echo; echo "== wheel"; tail -15 "$W/wheel.log"; } >>"$T"
  fi
  OUT="$W/diff" timeout 150 "$ROOT/scripts/gpu-diff.sh" >"$W/diff.txt" 2>&1
  { echo; echo "== diff"; head -12 "$W/diff/diff.txt"; } >>"$T"
  echo "wheel, diff done at ${SECONDS}s" | tee -a "$T"
  # A/Bs: host sampler and call sites on/off, the launch loop and the MLP step.
  settings_ab launch,mlp "${AB_PAIRS:-4}" 540 "GPUTRACE_HOST=1:0 GPUTRACE_PYSTACK=1:0"
  { echo; echo "== A/B (interleaved; ratio of medians per pair)"; cat "$W/ab.txt"; } >>"$T"
  ( cd "$W" && tar czf "$OUT/wave-c.tgz" $(ls -d suite suite.log wheel wheel.log diff diff*.txt diff-*.log ab ab.txt 2>/dev/null) )
  ( cd "$W" && tar czf "$OUT/wave-c-examples.tgz" examples )
fi
if [ "$PART" = e ]; then
  # The same steps as part d, with what run 7 left for them.
  PART=d SUITE2=${SUITE2:-data_starvation,workers_saturated,implicit_sync,healthy} SUITE2_S=${SUITE2_S:-150} \
    AB=${AB:-"GPUTRACE_PYSTACK=1:0 GPUTRACE_PYSAMPLE_MS=10:0 GPUTRACE_PM=1:0"} AB_STEPS=${AB_STEPS:-mlp,resnet50} \
    AB_PAIRS=${AB_PAIRS:-3} AB_END_S=${AB_END_S:-420} OUT="$OUT" "$0"
  exit $?
fi

if [ "$PART" = d ]; then
  for v in plain pm; do
    d=$W/example-$v; mkdir -p "$d"
    pm=0; [ $v = pm ] && pm=1
    ( cd "$d" && GPUTRACE_PM=$pm timeout 120 "$G" run -o "$d/train" -- "$PY" "$ROOT/scripts/workloads/example/train.py" ) >"$d/run.log" 2>&1
    echo "rc=$?" >>"$d/run.log"
    "$G" report "$d"/train/*.gtrace >"$d/report.txt" 2>&1
    "$G" report --json "$d"/train/*.gtrace >"$d/report.json" 2>>"$d/report.txt"
    { echo; echo "== example ($v)"; grep -m1 VERDICT "$d/report.txt"; grep -E "^ [0-9]+\. |called from|^   (host|env) " "$d/report.txt" | head -12; tail -1 "$d/run.log"; } >>"$T"
  done
  echo "example done at ${SECONDS}s" | tee -a "$T"
  if [ -d "$ROOT/.whl-gputrace" ]; then
    OUT="$W/wheel" timeout 120 "$ROOT/scripts/wheel-gpu-check.sh" "$ROOT/.whl-gputrace" >"$W/wheel.log" 2>&1
    echo "wheel check rc=$?" >>"$W/wheel.log"
    { echo; echo "== wheel"; tail -8 "$W/wheel.log"; } >>"$T"
  fi
  echo "wheel done at ${SECONDS}s" | tee -a "$T"
  if [ -x "$ROOT/scripts/gpu-pm.sh" ]; then
    OUT="$W/pm" timeout 170 "$ROOT/scripts/gpu-pm.sh" >"$W/pm.log" 2>&1
    echo "gpu-pm rc=$?" >>"$W/pm.log"
    { echo; echo "== PM sampling"; tail -25 "$W/pm.log"; } >>"$T"
    cp "$W"/pm/*.json "$OUT/" 2>/dev/null
  fi
  echo "pm done at ${SECONDS}s" | tee -a "$T"
  # The rest of the pathology suite on this build (the host workloads ran in part c).
  if [ -n "${SUITE2:-}" ]; then
    SUITE=$SUITE2 AB_ROUNDS_MAX=0 OUT="$W/suite2" timeout "${SUITE2_S:-120}" "$ROOT/scripts/gpu-host-check.sh" >"$W/suite2.log" 2>&1
    { echo; echo "== pathology ($SUITE2)"; sed -n '/== pathology/,/== the sampler/p' "$W/suite2/host-check.txt"; } >>"$T"
    echo "suite2 done at ${SECONDS}s" | tee -a "$T"
  fi
  # Each A/B: SETTING=on-value:off-value.
  settings_ab "${AB_STEPS:-launch,mlp,resnet50}" "${AB_PAIRS:-3}" "${AB_END_S:-330}" "${AB:-GPUTRACE_HOST=1:0}"
  { echo; echo "== A/B (interleaved)"; cat "$W/ab.txt"; } >>"$T"
  ( cd "$W" && tar czf "$OUT/wave-d.tgz" $(ls -d example-* wheel wheel.log pm pm.log suite2 suite2.log ab ab.txt 2>/dev/null) )
fi
if [ "$PART" = f ]; then
  for part in ${PARTS:-hang:150 hang-live:170}; do
    name=${part%%:*}; lim=${part#*:}
    if [ -x "$ROOT/scripts/gpu-$name.sh" ]; then
      OUT="$W" timeout "$lim" "$ROOT/scripts/gpu-$name.sh" >"$W/$name.log" 2>&1
      echo "gpu-$name rc=$?" >>"$W/$name.log"
      { echo; echo "== $name"; tail -25 "$W/$name.log"; } >>"$T"
      cp "$W/$name"/summary.json* "$OUT/$name-summary.jsonl" 2>/dev/null
      ( cd "$W" && tar czf "$OUT/wave-f-$name.tgz" "$name" "$name.log" )
    fi
    echo "$name done at ${SECONDS}s" | tee -a "$T"
  done
  # The bundled example (examples/train), with everything this build records.
  d=$W/example; mkdir -p "$d"
  ( cd "$d" && timeout 120 "$G" run -o "$d/train" -- "$PY" "$ROOT/scripts/workloads/example/train.py" ) >"$d/run.log" 2>&1
  echo "rc=$?" >>"$d/run.log"
  "$G" report "$d"/train >"$d/report.txt" 2>&1
  { echo; echo "== example"; grep -m1 VERDICT "$d/report.txt"; grep -E "^ [0-9]+\. |^   (host|env|gpu) " "$d/report.txt" | head -12; tail -1 "$d/run.log"; } >>"$T"
  ( cd "$W" && tar czf "$OUT/wave-f-example.tgz" example )
  echo "example done at ${SECONDS}s" | tee -a "$T"
  # The watchdog and the signal handlers on/off.
  settings_ab "${AB_STEPS:-launch,mlp}" "${AB_PAIRS:-4}" "${AB_END_S:-560}" "${AB:-GPUTRACE_STALL_MS=5000:0}"
  { echo; echo "== A/B (interleaved)"; cat "$W/ab.txt"; } >>"$T"
  ( cd "$W" && tar czf "$OUT/wave-f-ab.tgz" ab ab.txt 2>/dev/null )
fi
if [ "$PART" = g ]; then
  for part in ${PARTS:-graphs:150 contention:200 overhead:240}; do
    name=${part%%:*}; lim=${part#*:}
    if [ -x "$ROOT/scripts/gpu/$name.sh" ]; then
      OUT="$W" timeout "$lim" "$ROOT/scripts/gpu/$name.sh" >"$W/$name.log" 2>&1
      echo "gpu/$name rc=$?" >>"$W/$name.log"
      { echo; echo "== $name"; tail -30 "$W/$name.log"; } >>"$T"
      ( cd "$W" && tar czf "$OUT/wave-g-$name.tgz" $(ls -d "$name" "$name.log" 2>/dev/null) )
    else
      echo "no scripts/gpu/$name.sh" >>"$T"
    fi
    echo "$name done at ${SECONDS}s" | tee -a "$T"
  done
  if [ "${EXAMPLE:-0}" = 1 ]; then
    d=$W/example; mkdir -p "$d"
    ( cd "$d" && timeout 120 "$G" run -o "$d/train" -- "$PY" "$ROOT/scripts/workloads/example/train.py" ) >"$d/run.log" 2>&1
    echo "rc=$?" >>"$d/run.log"
    "$G" report "$d"/train >"$d/report.txt" 2>&1
    { echo; echo "== example"; grep -m1 VERDICT "$d/report.txt"; grep -E "^ [0-9]+\. |^   (host|env|gpu) " "$d/report.txt" | head -12; tail -1 "$d/run.log"; } >>"$T"
    ( cd "$W" && tar czf "$OUT/wave-g-example.tgz" example )
    echo "example done at ${SECONDS}s" | tee -a "$T"
  fi
fi
echo "finished at ${SECONDS}s" >>"$T"
cat "$T"
