#!/usr/bin/env bash
# Export speed, peak memory and output size on the 10 M-event benchmark trace (the
# synthetic training loop of analyzer/benches/report.rs), against `gputrace report` on
# the same file (an export runs the same analysis first). Writes bench/export.json.
#
#   scripts/bench-export.sh            (GPUTRACE_BENCH_EVENTS=N for another size)
#   GPUTRACE_BENCH_SAMPLED=2 scripts/bench-export.sh   (the trace with the samplers' data and
#                                      a host wait per step; writes bench/export-sampled.json)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${GPUTRACE_BENCH_EVENTS:-10000000}
SAMPLED=${GPUTRACE_BENCH_SAMPLED:-0}
RESULT=bench/export.json
[ "$SAMPLED" = 0 ] || RESULT=bench/export-sampled.json
W=${W:-/tmp/gputrace-bench-export}
rm -rf "$W"; mkdir -p "$W"
cargo build --release -p gputrace-analyzer --bin gputrace
# The benchmark writes its synthetic trace (one repetition is enough here).
GPUTRACE_BENCH_EVENTS=$N GPUTRACE_BENCH_REPS=1 GPUTRACE_BENCH_WRITE="$W/bench.gtrace" \
  cargo bench -p gputrace-analyzer --bench report > "$W/report-bench.txt"
G=target/release/gputrace
T="$W/bench.gtrace"
measure() { # name, command...: wall s and peak RSS MiB, median of 3 by wall
  local name=$1; shift
  for i in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$W/time.$i" "$@" > /dev/null 2> "$W/err.$i"
  done
  sort -n "$W"/time.* | sed -n 2p > "$W/$name.time"
  rm -f "$W"/time.*
}
measure report "$G" report "$T"
measure perfetto "$G" export --force --format perfetto -o "$W/out.pftrace" "$T"
measure chrome "$G" export --force --format chrome -o "$W/out.json" "$T"
measure parquet "$G" export --force --format parquet -o "$W/parquet" "$T"
size() { du -sb "$1" | cut -f1; }
EVENTS=$(sed -n 's/^events *\([0-9]*\).*/\1/p' "$W/report-bench.txt")
python3 - "$W" "${EVENTS:-$N}" "$(size "$T")" "$(size "$W/out.pftrace")" "$(size "$W/out.json")" "$(size "$W/parquet")" "$RESULT" "$SAMPLED" <<'PY'
import json, sys, datetime
w, n, gt, pf, ch, pq = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:7])
result, sampled = sys.argv[7], sys.argv[8]
def t(name):
    s, kb = open(f"{w}/{name}.time").read().split()
    return float(s), int(kb) / 1024
out = {
    "date": datetime.date.today().isoformat(),
    "machine": "2-core x86_64 CPU VM, 24 GiB, shared with builds",
    "command": "scripts/bench-export.sh",
    "trace": {"events": n, "bytes": gt, "source": "analyzer/benches/report.rs synthesize()",
              "GPUTRACE_BENCH_SAMPLED": sampled},
    "note": "wall s and peak RSS MiB, the median of 3 runs by wall time; an export includes the analysis `report` does",
}
for name, size in (("report", None), ("perfetto", pf), ("chrome", ch), ("parquet", pq)):
    s, mib = t(name)
    e = {"wall_s": s, "peak_rss_mib": round(mib, 1), "events_per_s": round(n / s)}
    if size is not None:
        e["output_bytes"] = size
        e["bytes_per_event"] = round(size / n, 1)
    out[name] = e
json.dump(out, open(result, "w"), indent=1)
print(json.dumps(out, indent=1))
PY
