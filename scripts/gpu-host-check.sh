#!/usr/bin/env bash
# The host sampler on the GPU machine, in one device call (about 5.5 minutes). Builds
# nothing: carries target/release/{gputrace,libgputrace.so}, built on the CPU machine.
#
#   scripts/gpu-host-check.sh                 # results under $OUT (default ./gpu-out)
#   SUITE=all END_S=540 scripts/gpu-host-check.sh   # the whole pathology suite too
# Build first on the CPU machine (cargo build --release -p gputrace-analyzer -p
# gputrace-interpose) and carry target/release/gputrace and target/release/libgputrace.so.
#
# 1. The pathology workloads that exercise the host samples (SUITE=host, the default:
#    main-process preprocessing, DataLoader workers saturated, too many workers, an
#    I/O-bound loader, empty_cache() in the loop, a long pause before the loop, a batch-1
#    training loop, token-by-token generation, the launch-bound loop), each under
#    `gputrace run`, reports checked against scripts/workloads/pathology/expect.json.
# 2. What the sampler itself cost in those runs: its thread's CPU time (from its own
#    samples in each trace) per second of trace.
# 3. Sampler on vs off, interleaved: processes alternately traced with the host sampler
#    (the default) and with GPUTRACE_HOST=0, ABBA order, same cores, the launch-bound loop
#    and the MLP step of scripts/workloads/bench/bench_workload.py, until END_S.
#
# Output (few files; the bulky ones packed): host-check.txt (the check table, the
# sampler's cost, the A/B summary), summary.json, host_ab.json, host-session.tgz
# (reports, logs, raw A/B lines, the traces of two workloads for examples/).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
LIB=$ROOT/target/release/libgputrace.so
END_S=${END_S:-330}
CPUS=${CPUS:-2-9}
W=/tmp/host-check; rm -rf "$W"; mkdir -p "$W/suite" "$W/ab"
export PYTHONUNBUFFERED=1
HOST_SET="data_starvation launch_bound workers_saturated too_many_workers io_bound_loader empty_cache_loop pause_before_loop batch1_training generation_loop"
case "${SUITE:-host}" in
  all) SET=$(cd "$ROOT/scripts/workloads/pathology" && ls *.py | grep -v '^check.py$' | sed 's/\.py$//' | tr '\n' ' ') ;;
  host) SET=$HOST_SET ;;
  *) SET=${SUITE//,/ } ;;  # a comma-separated list of workloads
esac
{
  echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "gputrace: $("$G" --version 2>&1)"
} >"$W/env.txt"
for n in $SET; do
  echo "== $n at ${SECONDS}s" >&2
  rm -rf "$W/suite/traces-$n"
  # The I/O-bound loader writes its shards on the repository's disk (not a tmpfs /tmp).
  ( cd "$W" && IO_DIR="$ROOT/target" timeout 90 "$G" run --summary -o "$W/suite/traces-$n" -- \
      "$PY" "$ROOT/scripts/workloads/pathology/$n.py" ) >"$W/suite/$n.log" 2>&1
  traces=("$W/suite/traces-$n"/*.gtrace)
  "$G" report --json "${traces[@]}" >"$W/suite/$n.json" 2>>"$W/suite/$n.log"
  "$G" report "${traces[@]}" >"$W/suite/$n.txt" 2>>"$W/suite/$n.log"
  # The sampler's own CPU time in this run (its thread samples itself every tree period).
  "$G" dump "$(ls "$W/suite/traces-$n"/*.gtrace | grep -v /gputrace-env- | head -1)" 2>/dev/null | "$PY" -c '
import json, sys
own, span = {}, [None, None]
for line in sys.stdin:
    e = json.loads(line)
    if e["type"] == "proc_sample" and e.get("role") == "thread" and e.get("comm") == "gputrace-sample":
        own.setdefault(e["tid"], []).append((e["ts_ns"], e["cpu_ns"]))
    if e["type"] == "thread_cpu":
        span[0] = e["ts_ns"] if span[0] is None else min(span[0], e["ts_ns"])
        span[1] = e["ts_ns"] if span[1] is None else max(span[1], e["ts_ns"])
cpu = sum(v[-1][1] - v[0][1] for v in own.values() if len(v) > 1)
wall = sum(v[-1][0] - v[0][0] for v in own.values() if len(v) > 1)
print("%-20s sampler thread %.2f ms of CPU in %.2f s of trace: %.3f%% of one core" % (
    sys.argv[1], cpu / 1e6, wall / 1e9, 100.0 * cpu / wall if wall else float("nan")))
' "$n" >>"$W/sampler_cost.txt" 2>&1
done
ONLY=$(echo $SET | tr ' ' ',')
"$PY" "$ROOT/scripts/workloads/pathology/check.py" "$W/suite" --only "$ONLY" --out "$OUT/summary.json" >"$W/check.txt" 2>&1
echo "suite done at ${SECONDS}s" >&2

# Sampler on vs off, ABBA rounds of two processes, until END_S minus one pair.
B="$ROOT/scripts/workloads/bench/bench_workload.py --only launch,mlp --launch-reps ${LAUNCH_REPS:-30}"
r=0; PAIR_S=0
while :; do
  left=$(( END_S - SECONDS ))
  [ "$r" -ge 2 ] && [ "$left" -lt $(( PAIR_S + 15 )) ] && break
  [ "$r" -ge "${AB_ROUNDS_MAX:-40}" ] && break
  t=$SECONDS
  for mode in $([ $((r % 2)) = 0 ] && echo "on off" || echo "off on"); do
    if [ "$mode" = on ]; then
      GPUTRACE_DIR=$W/ab/t LD_PRELOAD=$LIB taskset -c "$CPUS" "$PY" $B >>"$W/ab/on.jsonl" 2>>"$W/ab/err.log"
    else
      GPUTRACE_DIR=$W/ab/t GPUTRACE_HOST=0 LD_PRELOAD=$LIB taskset -c "$CPUS" "$PY" $B >>"$W/ab/off.jsonl" 2>>"$W/ab/err.log"
    fi
  done
  rm -rf "$W/ab/t"
  PAIR_S=$(( SECONDS - t )); r=$((r + 1))
done
echo "A/B: $r pairs, done at ${SECONDS}s" >&2
"$PY" - "$W/ab/on.jsonl" "$W/ab/off.jsonl" "$OUT/host_ab.json" <<'EOF' >"$W/ab_summary.txt" 2>&1
import json, statistics as st, sys
on = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
off = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
n = min(len(on), len(off))
out = {"pairs": n, "metrics": {}}
lines = []
for k in ("launch_us", "launch_min_us", "mlp_us"):
    ratios = [on[i][k] / off[i][k] for i in range(n) if k in on[i] and k in off[i] and off[i][k] > 0]
    if not ratios:
        continue
    m = {"median_ratio": st.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
         "ratios": ratios, "on_median": st.median(x[k] for x in on[:n]),
         "off_median": st.median(x[k] for x in off[:n])}
    out["metrics"][k] = m
    lines.append("%-14s sampler on/off: median ratio %.4f (min %.4f, max %.4f) over %d pairs; "
                 "medians %.2f us on, %.2f us off" % (k, m["median_ratio"], m["min_ratio"],
                                                     m["max_ratio"], len(ratios), m["on_median"],
                                                     m["off_median"]))
json.dump(out, open(sys.argv[3], "w"), indent=1)
print("\n".join(lines))
EOF
{
  cat "$W/env.txt"
  echo; echo "== pathology workloads (check.py)"; cat "$W/check.txt"
  echo; echo "== the sampler's own CPU time"; cat "$W/sampler_cost.txt" 2>/dev/null
  echo; echo "== sampler on vs off (GPUTRACE_HOST=0), interleaved"; cat "$W/ab_summary.txt"
  echo; echo "finished at ${SECONDS}s"
} >"$OUT/host-check.txt"
# Two traces for examples/: the saturated workers and the main-process preprocessing.
mkdir -p "$W/examples"
for n in workers_saturated data_starvation; do
  f=$(ls "$W/suite/traces-$n"/*.gtrace 2>/dev/null | grep -v /gputrace-env- | head -1)
  [ -n "$f" ] && cp "$f" "$W/examples/$n.gtrace"
done
( cd "$W" && tar czf "$OUT/host-session.tgz" $(ls -d suite/*.json suite/*.txt suite/*.log ab examples check.txt sampler_cost.txt 2>/dev/null) )
cat "$OUT/host-check.txt"
