#!/usr/bin/env bash
# CUDA graph replays on the H200 (issue 30). Builds nothing: it uses target/release/gputrace
# and target/release/libgputrace.so built on the CPU machine and carried.
#
#   scripts/gpu/graphs.sh        # results under $OUT/graphs (default ./gpu-out/graphs)
#
# 1. The four graph workloads of the pathology suite (cuda_graphs.py, graph_train_step.py,
#    graph_host_behind.py, reduce_overhead.py) through `gputrace run`, reported, and checked
#    with check.py against expect.json (graph_replay steps, graph_gaps, launch_bound only where
#    the host is behind, no advice to use CUDA graphs, compile workers counted not listed).
# 2. The cost of node-level tracing (every kernel of every replay, the default) and of
#    graph-level tracing (GPUTRACE_ACTIVITY=...,graph) on cuda_graphs.py: untraced vs both,
#    3 interleaved rounds, the loop's own time; what each recorded.
# Each result is appended to summary.txt as soon as it is measured; the table is printed last.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}/graphs
PY=${PY:-$(command -v python3)}
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G="$ROOT/target/release/gputrace"
LIB="$ROOT/target/release/libgputrace.so"
W="$ROOT/scripts/workloads/pathology"
mkdir -p "$OUT"
SUM="$OUT/summary.txt"
: >"$SUM"
export PYTHONUNBUFFERED=1
note() { echo "$*" | tee -a "$SUM"; }
note "graphs.sh $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

# 1. The workloads, as run.sh runs them (each at most 120 s).
for name in cuda_graphs graph_train_step graph_host_behind reduce_overhead; do
  rm -rf "$OUT/traces-$name"
  timeout 120 "$G" run --summary -o "$OUT/traces-$name" -- "$PY" "$W/$name.py" >"$OUT/$name.log" 2>&1
  echo "rc=$?" >>"$OUT/$name.log"
  traces=("$OUT/traces-$name"/*.gtrace)
  "$G" report --json "${traces[@]}" >"$OUT/$name.json" 2>>"$OUT/$name.log"
  "$G" report "${traces[@]}" >"$OUT/$name.txt" 2>>"$OUT/$name.log"
  n=$(ls "$OUT/traces-$name"/*.gtrace 2>/dev/null | grep -vc gputrace-env-)
  note "$name: $n trace files; $(grep -m1 '^VERDICT' "$OUT/$name.txt")"
  grep -E '^   (graphs|steady) |^     graph |^NOTE: .*never used CUDA' "$OUT/$name.txt" | tee -a "$SUM"
done
"$PY" "$W/check.py" "$OUT" --only cuda_graphs,graph_train_step,graph_host_behind,reduce_overhead \
  --out "$OUT/check.json" >"$OUT/check.txt" 2>&1
cat "$OUT/check.txt" >>"$SUM"

# 2. Tracing cost on cuda_graphs.py (its printed loop time "s"), interleaved: untraced,
#    node-level (the default: a kernel record per node) and graph-level
#    (GPUTRACE_ACTIVITY=...,graph: one record per replay).
loop_s() { grep -o '"s": [0-9.]*' "$1" | tail -1 | awk '{print $2}'; }
for round in 1 2 3; do
  "$PY" "$W/cuda_graphs.py" >"$OUT/ab-none-$round.out" 2>&1
  rm -rf "$OUT/ab-node-$round" "$OUT/ab-graph-$round"
  GPUTRACE_DIR="$OUT/ab-node-$round" LD_PRELOAD="$LIB" "$PY" "$W/cuda_graphs.py" >"$OUT/ab-node-$round.out" 2>&1
  GPUTRACE_DIR="$OUT/ab-graph-$round" GPUTRACE_ACTIVITY=kernel,memcpy,memset,device,memory,graph \
    LD_PRELOAD="$LIB" "$PY" "$W/cuda_graphs.py" >"$OUT/ab-graph-$round.out" 2>&1
  note "ab round $round: untraced $(loop_s "$OUT/ab-none-$round.out") s, node-level $(loop_s "$OUT/ab-node-$round.out") s, graph-level $(loop_s "$OUT/ab-graph-$round.out") s"
done
# What each level recorded (last round): kernels and graph_trace records.
for lvl in node graph; do
  t=$(ls "$OUT/ab-$lvl-3"/*.gtrace 2>/dev/null | head -1)
  [ -n "$t" ] && note "$lvl-level trace: $("$G" dump "$t" 2>/dev/null | grep -o '"type":"[a-z_]*"' | sort | uniq -c | grep -E 'kernel|graph_trace' | tr -s ' ' | tr '\n' ';') $(du -k "$t" | cut -f1) KiB"
done

echo
echo "== CUDA graphs on the H200 (full log: $SUM)"
cat "$OUT/check.txt"
grep '^ab round' "$SUM"
