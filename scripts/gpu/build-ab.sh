#!/usr/bin/env bash
# One pathology workload under two builds, interleaved: this build (target/release) and
# another (B: a folder holding its gputrace and libgputrace.so, carried, e.g. dist/old),
# ROUNDS rounds, the order alternating. Per run: the findings at warn or above, the
# launch_bound share, and the graph replays' cudaGraphLaunch median where the report has
# one. Builds nothing. Appends to $OUT/build-ab/summary.jsonl as measured; table last.
#   B=dist/old WORKLOAD=cuda_graphs ROUNDS=3 scripts/gpu/build-ab.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; D=$OUT/build-ab; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
WORKLOAD=${WORKLOAD:-cuda_graphs}; ROUNDS=${ROUNDS:-3}
B=${B:-$ROOT/dist/old}
W=/tmp/build-ab; rm -rf "$W"; mkdir -p "$W"
one() { # NAME DIR_OF_GPUTRACE ROUND
  local t=$W/$1-$3
  timeout 120 "$2/gputrace" run --summary -o "$t" -- "$PY" "$ROOT/scripts/workloads/pathology/$WORKLOAD.py" >"$t.log" 2>&1
  "$2/gputrace" report "$t"/*.gtrace >"$t.txt" 2>>"$t.log"
  "$PY" - "$1" "$3" "$t.txt" >>"$D/summary.jsonl" <<'PYEOF'
import json, re, sys
name, rnd, path = sys.argv[1:4]
text = open(path).read()
warn = re.findall(r"^\s*\d+\. (?:CRITICAL|WARN)\s+(\w+)", text, re.M)
lb = re.search(r"^\s*\d+\. \w+\s+launch_bound .*?([\d.]+)% of steady", text, re.M)
gl = re.search(r"cudaGraphLaunch median ([\d.]+) (µs|ms)", text)
ms = float(gl.group(1)) * (1000 if gl and gl.group(2) == "ms" else 1) if gl else None
print(json.dumps({"build": name, "round": int(rnd), "warn": warn,
                  "launch_bound_pct": float(lb.group(1)) if lb else 0.0,
                  "graph_launch_us": ms}))
PYEOF
  cp "$t.txt" "$D/$1-$3.txt"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then one new "$ROOT/target/release" "$r"; one old "$B" "$r"
  else one old "$B" "$r"; one new "$ROOT/target/release" "$r"; fi
done
"$PY" - "$D/summary.jsonl" <<'PYEOF'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("build  runs  launch_bound% (each)            cudaGraphLaunch us (median)  warn-level findings (first run)")
for b in ("new", "old"):
    r = [x for x in rows if x["build"] == b]
    if not r:
        continue
    lb = " ".join("%.1f" % x["launch_bound_pct"] for x in r)
    gl = [x["graph_launch_us"] for x in r if x["graph_launch_us"] is not None]
    print("%-6s %4d  %-32s %-28s %s" % (b, len(r), lb, "%.1f" % st.median(gl) if gl else "-", ",".join(r[0]["warn"])))
PYEOF
