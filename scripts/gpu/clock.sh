#!/usr/bin/env bash
# CUPTI's clock after torch.profiler: blind_window.py (a GPU-bound step, then a profiled
# stretch, then the same step again) under `gputrace run` with GPUTRACE_DEBUG=1, so the
# library logs every clock pair and, per CUPTI buffer, its first kernel's raw and converted
# times. Then per phase (the script's own CLOCK_REALTIME marks), the median duration of the
# step's busiest kernel in the trace: the same before and after the profiler when GPU
# times are converted right. Builds nothing (target/release carried). Results in
# $OUT/clock/: stderr.txt (the debug lines), run.out, report.txt, phases.json; a line
# appended to $SUMMARY.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/clock; rm -rf "$D"; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
S=${SUMMARY:-$D/summary.jsonl}
export PYTHONUNBUFFERED=1
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
PHASE_S=${PHASE_S:-1.5} PROFILED_S=${PROFILED_S:-3} GPUTRACE_DEBUG=1 \
  "$G" run -o "$D/traces" -- "$PY" "$ROOT/scripts/workloads/pathology/blind_window.py" \
  >"$D/run.out" 2>"$D/stderr.txt"
echo "rc=$?" >>"$D/run.out"
T=$(ls "$D"/traces/*.gtrace | grep -v gputrace-env- | head -1)
"$G" report "$T" >"$D/report.txt" 2>&1
"$G" dump "$T" >"$D/dump.jsonl" 2>/dev/null
"$PY" - "$D/run.out" "$D/dump.jsonl" >"$D/phases.json" <<'PYEOF'
import collections, json, statistics, sys
marks = {}
for line in open(sys.argv[1]):
    if line.startswith("{") and "marks_ns" in line:
        marks = json.loads(line)["marks_ns"]
kernels = collections.defaultdict(list)
for line in open(sys.argv[2]):
    d = json.loads(line)
    if d.get("type") == "kernel":
        kernels[d["name"]].append((d["ts_ns"], d["dur_ns"]))
name = max(kernels, key=lambda n: sum(x[1] for x in kernels[n])) if kernels else None
out = {"kernel": (name or "")[:60], "phases": {}}
edges = [("before", "before", "profiler_enter"), ("profiled", "profiled", "profiler_exit"),
         ("after", "after", "end")]
for label, a, b in edges:
    if a in marks and b in marks and name:
        ds = [d for t, d in kernels[name] if marks[a] <= t < marks[b]]
        out["phases"][label] = {"kernels": len(ds), "median_dur_ns": statistics.median(ds) if ds else None}
print(json.dumps(out))
PYEOF
cat "$D/phases.json" >>"$S"
gzip -f "$D/dump.jsonl"
grep -c "cupti clock" "$D/stderr.txt" | sed 's/^/debug lines: /'
cat "$D/phases.json"
