#!/usr/bin/env bash
# Who held the host, on the GPU machine, in one device call (about 5 minutes). Builds
# nothing: carries target/release/{gputrace,libgputrace.so}, built on the CPU machine.
#
#   OUT=/path scripts/gpu/contention.sh        # results under $OUT/contention/
#
# 1. The contention workloads of the pathology suite (a thread holding the GIL beside a
#    training loop, a loop fed by a slow producer thread, a JAX loop, 4 DataLoader workers
#    blocking 2 ms per sample) and the main-process preprocessing loop (the thread named),
#    each under `gputrace run`, reports checked against
#    scripts/workloads/pathology/expect.json; each report (text) kept.
# 2. The per-thread sampling's cost: processes alternately traced with
#    GPUTRACE_HOST_ALL_THREADS=1 (the default) and =0, ABBA order, same cores, the
#    launch-bound loop and the MLP step of scripts/workloads/bench/bench_workload.py,
#    until END_S; per-pair ratios and medians.
# Results are appended as soon as each is measured: $OUT/contention/contention.txt (the
# table), check.txt, ab_on.jsonl / ab_off.jsonl, ab.json, <workload>.txt/.json/.log.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
R="$OUT/contention"; mkdir -p "$R"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
LIB=$ROOT/target/release/libgputrace.so
END_S=${END_S:-290}
CPUS=${CPUS:-2-9}
W=/tmp/contention; rm -rf "$W"; mkdir -p "$W/ab"
export PYTHONUNBUFFERED=1
SET=${SET:-"gil_holder producer_thread jax_dispatch workers_latency data_starvation"}
{
  echo "host: $(nproc) CPUs; python: $("$PY" --version 2>&1)"
  echo "gputrace: $("$G" --version 2>&1)"
} >"$R/contention.txt"
for n in $SET; do
  echo "== $n at ${SECONDS}s" >&2
  rm -rf "$W/traces-$n"
  ( cd "$W" && timeout 75 "$G" run --summary -o "$W/traces-$n" -- \
      "$PY" "$ROOT/scripts/workloads/pathology/$n.py" ) >"$R/$n.log" 2>&1
  traces=("$W/traces-$n"/*.gtrace)
  "$G" report --json "${traces[@]}" >"$R/$n.json" 2>>"$R/$n.log"
  "$G" report "${traces[@]}" >"$R/$n.txt" 2>>"$R/$n.log"
  # What the new samples hold, per workload: GIL samples, blocked-thread waits, threads.
  f=$(ls "$W/traces-$n"/*.gtrace 2>/dev/null | grep -v /gputrace-env- | head -1)
  [ -n "$f" ] && "$G" dump "$f" 2>/dev/null | "$PY" -c '
import json, sys, collections
c = collections.Counter(); tids = set(); held = collections.Counter(); calls = collections.Counter()
for line in sys.stdin:
    e = json.loads(line)
    t = e.get("type")
    c[t] += 1
    if t == "thread_cpu": tids.add(e.get("tid"))
    if t == "gil_sample" and e.get("locked"): held[e.get("holder")] += 1
    if t == "task_wait": calls[e.get("syscall")] += 1
print("%-16s thread_cpu %d (%d threads), gil_sample %d (held by %s), task_wait %d (syscalls %s), py_sample %d" % (
    sys.argv[1], c["thread_cpu"], len(tids), c["gil_sample"], dict(held.most_common(3)),
    c["task_wait"], dict(calls.most_common(5)), c["py_sample"]))
' "$n" >>"$R/samples.txt" 2>&1
  "$PY" "$ROOT/scripts/workloads/pathology/check.py" "$R" --only "$n" --out "$W/one.json" 2>&1 | sed -n 2p >>"$R/check.txt"
done
ONLY=$(echo $SET | tr ' ' ',')
"$PY" "$ROOT/scripts/workloads/pathology/check.py" "$R" --only "$ONLY" --out "$R/summary.json" >"$R/check_all.txt" 2>&1
echo "suite done at ${SECONDS}s" >&2

# Per-thread sampling on vs off, ABBA rounds of two processes, until END_S minus one pair.
B="$ROOT/scripts/workloads/bench/bench_workload.py --only launch,mlp --launch-reps ${LAUNCH_REPS:-30}"
r=0; PAIR_S=0
while :; do
  left=$(( END_S - SECONDS ))
  [ "$r" -ge 2 ] && [ "$left" -lt $(( PAIR_S + 10 )) ] && break
  [ "$r" -ge "${AB_ROUNDS_MAX:-40}" ] && break
  t=$SECONDS
  for mode in $([ $((r % 2)) = 0 ] && echo "on off" || echo "off on"); do
    v=$([ "$mode" = on ] && echo 1 || echo 0)
    GPUTRACE_DIR=$W/ab/t GPUTRACE_HOST_ALL_THREADS=$v LD_PRELOAD=$LIB taskset -c "$CPUS" \
      "$PY" $B >>"$R/ab_$mode.jsonl" 2>>"$R/ab_err.log"
  done
  rm -rf "$W/ab/t"
  PAIR_S=$(( SECONDS - t )); r=$((r + 1))
done
echo "A/B: $r pairs, done at ${SECONDS}s" >&2
"$PY" - "$R/ab_on.jsonl" "$R/ab_off.jsonl" "$R/ab.json" <<'PYEOF' >"$R/ab_summary.txt" 2>&1
import json, statistics as st, sys
on = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
off = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
n = min(len(on), len(off))
out = {"pairs": n, "metrics": {}}
for k in ("launch_us", "launch_min_us", "mlp_us"):
    ratios = [on[i][k] / off[i][k] for i in range(n) if k in on[i] and k in off[i] and off[i][k] > 0]
    if not ratios:
        continue
    m = {"median_ratio": st.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
         "ratios": ratios, "on_median": st.median(x[k] for x in on[:n]),
         "off_median": st.median(x[k] for x in off[:n])}
    out["metrics"][k] = m
    print("%-14s all-threads on/off: median ratio %.4f (min %.4f, max %.4f) over %d pairs; "
          "medians %.2f us on, %.2f us off" % (k, m["median_ratio"], m["min_ratio"],
                                              m["max_ratio"], len(ratios), m["on_median"], m["off_median"]))
json.dump(out, open(sys.argv[3], "w"), indent=1)
PYEOF
{
  echo; echo "== contention workloads (check.py)"; cat "$R/check_all.txt"
  echo; echo "== what was sampled"; cat "$R/samples.txt" 2>/dev/null
  echo; echo "== GPUTRACE_HOST_ALL_THREADS=1 vs 0, interleaved"; cat "$R/ab_summary.txt"
  echo; echo "finished at ${SECONDS}s"
} >>"$R/contention.txt"
cat "$R/contention.txt"
