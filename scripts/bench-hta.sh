#!/usr/bin/env bash
# The same job of N ranks x EVENTS events through Holistic Trace Analysis and through
# `gputrace fleet`, side by side: wall time and peak memory (the whole process tree's RSS,
# sampled every 200 ms: HTA parses ranks in worker processes). The rank trace is the
# synthetic training loop of analyzer/benches/report.rs at EVENTS events; HTA gets our
# Chrome export of it once per rank (its `distributedInfo.rank` set), loads the directory
# (TraceAnalysis) and computes its temporal breakdown, the per-rank idle/compute/comm split;
# gputrace gets a dataset of N ranks of EVENTS rows each (scripts/fleet_gen.py, tiling
# examples/nccl_single_rank.gtrace, which has collectives, where the synthetic loop has
# none; a straggler injected) and runs `gputrace fleet`. HTA is run at each N of HTA_RANKS while the machine
# has the memory (it stops at the first that fails). Appends to bench/hta.json.
# Needs a gputrace built with --features fleet (GPUTRACE=...), and PyPI for the venv.
#   HTA_RANKS="1 2 4" EVENTS=1000000 scripts/bench-hta.sh
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${EVENTS:-1000000}
HTA_RANKS=${HTA_RANKS-1 2 4 8}
FLEET_RANKS=${FLEET_RANKS-1 2 4 8 64}
G=${GPUTRACE:-target/fleet-rel/release/gputrace}
W=${W:-/tmp/gputrace-bench-hta}
VENV=target/hta-venv
PINS="HolisticTraceAnalysis==0.5.0 pyarrow==26.0.1 psutil==7.2.2"
. scripts/lib/venv.sh
pinned_venv "$VENV" "$PINS" "the HTA benchmark"
PY=$VENV/bin/python
mkdir -p "$W"
T=$W/rank.gtrace
if [ ! -f "$T" ]; then
  GPUTRACE_BENCH_EVENTS=$EVENTS GPUTRACE_BENCH_REPS=1 GPUTRACE_BENCH_WRITE="$T" \
    cargo bench -p gputrace-analyzer --bench report >"$W/report-bench.txt"
fi
[ -f "$W/rank0.json" ] || "$G" export --format chrome -o "$W/rank0.json" "$T" >/dev/null
[ -d "$W/src" ] || "$G" dataset -o "$W/src" --job src examples/nccl_single_rank.gtrace >/dev/null
exec "$PY" - "$G" "$W" "$EVENTS" "$HTA_RANKS" "$FLEET_RANKS" "$(git rev-parse --short HEAD)" <<'PYEOF'
import json, os, re, shutil, subprocess, sys, time, datetime
import psutil
g, w, events, hta_ranks, fleet_ranks, commit = sys.argv[1:]
hta_ranks = [int(x) for x in hta_ranks.split()]
fleet_ranks = [int(x) for x in fleet_ranks.split()]
py = sys.executable


def measured(cmd, limit_s=1800):
    """Runs cmd; (wall s, peak RSS MiB of its process tree, return code)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    top = psutil.Process(p.pid)
    while p.poll() is None:
        try:
            procs = [top] + top.children(recursive=True)
            rss = sum(x.memory_info().rss for x in procs if x.is_running())
            peak = max(peak, rss)
        except psutil.Error:
            pass
        if time.time() - t0 > limit_s:
            p.kill()
        time.sleep(0.2)
    err = p.stderr.read()
    return round(time.time() - t0, 1), round(peak / 2**20, 1), p.returncode, err[-500:]


HTA = r'''
import sys, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
b = a.get_temporal_breakdown(visualize=False)
print(len(b))
'''
src = os.path.join(w, "rank0.json")
doc = open(src).read()
rows = []
for n in hta_ranks:
    d = os.path.join(w, f"hta-{n}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for r in range(n):
        text = re.sub(r'"distributedInfo": \{"rank": \d+, "world_size": \d+\}',
                      f'"distributedInfo": {{"rank": {r}, "world_size": {n}}}', doc, count=1)
        open(os.path.join(d, f"rank{r}.json"), "w").write(text)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    wall, rss, rc, err = measured([py, "-c", HTA, d])
    shutil.rmtree(d, ignore_errors=True)
    row = {"tool": "hta", "ranks": n, "input_bytes": size, "wall_s": wall, "peak_rss_mib": rss, "ok": rc == 0}
    if rc != 0:
        row["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
    rows.append(row)
    print(json.dumps(row), flush=True)
    if rc != 0:
        break
for n in fleet_ranks:
    d = os.path.join(w, f"ds-{n}")
    if not os.path.exists(os.path.join(d, "answers.json")):
        shutil.rmtree(d, ignore_errors=True)
        args = [py, "scripts/fleet_gen.py", os.path.join(w, "src"), d, "--ranks", str(n),
                "--events", events]
        if n > 1:
            args += ["--straggler", str(n - 1)]
        subprocess.run(args, check=True, capture_output=True)
    size = int(subprocess.run(["du", "-sb", d], capture_output=True, text=True).stdout.split()[0])
    # One process, often shorter than the sampling period: its own peak from time -v.
    wall, _, rc, err = measured(["/usr/bin/time", "-f", "maxrss_kb %M", g, "fleet", "--json", "--memory", "2G", d])
    m = re.search(r"maxrss_kb (\d+)", err)
    rss = round(int(m.group(1)) / 1024, 1) if m else None
    row = {"tool": "gputrace fleet", "ranks": n, "input_bytes": size, "wall_s": wall, "peak_rss_mib": rss, "ok": rc == 0}
    rows.append(row)
    print(json.dumps(row), flush=True)
out = "bench/hta.json"
data = json.load(open(out)) if os.path.exists(out) else {
    "about": "Holistic Trace Analysis (TraceAnalysis + get_temporal_breakdown on our Chrome export, one file per rank) beside gputrace fleet on the same job as a dataset (scripts/bench-hta.sh): wall time and peak RSS of the whole process tree",
    "runs": []}
data["runs"].append({"date": datetime.date.today().isoformat(), "commit": commit,
                     "machine": "2-core VM (rust kind), %d GiB RAM" % round(psutil.virtual_memory().total / 2**30),
                     "events_per_rank": int(events), "rows": rows})
json.dump(data, open(out, "w"), indent=2)
print("wrote", out)
PYEOF
