#!/usr/bin/env bash
# The analyzer's speed and memory, one build against another on the same machine in one
# run: `report`, `summary` and the Perfetto and Parquet exports on the synthetic training
# loop of analyzer/benches/report.rs at 1 M, 10 M and 50 M events, and `report` on the
# writer's own trace (5.4 M kernel events from interpose/benches/pipeline.rs). Each
# measure is RUNS interleaved pairs (before, after); wall time and peak RSS
# (/usr/bin/time) are the medians. Writes bench/analyzer.json and prints a table.
#
#   BEFORE=/path/to/old/gputrace scripts/bench-analyzer.sh
#   SIZES="1000000 10000000" RUNS=3 EXPORT_MAX=10000000 BEFORE=... scripts/bench-analyzer.sh
#
# AFTER defaults to this tree's release build (built here). Exports run up to EXPORT_MAX
# events (default 10 M: a 50 M-event export takes minutes a run on 2 cores); sizes over
# BIG (default 10 M) run BIG_RUNS pairs (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BEFORE:?BEFORE=path of the gputrace binary to compare against}"
SIZES=${SIZES:-"1000000 10000000 50000000"}
RUNS=${RUNS:-3}
BIG=${BIG:-10000000}
BIG_RUNS=${BIG_RUNS:-1}
EXPORT_MAX=${EXPORT_MAX:-10000000}
W=${W:-/tmp/gputrace-bench-analyzer}
RESULT=${RESULT:-bench/analyzer.json}
mkdir -p "$W"
if [ -z "${AFTER:-}" ]; then
  cargo build -q --release -p gputrace-analyzer --bin gputrace
  AFTER=target/release/gputrace
fi
cp "$BEFORE" "$W/before"; cp "$AFTER" "$W/after"
ROWS="$W/rows.jsonl"; : > "$ROWS"

trace_of() { # events -> path (made once, kept in $W)
  local n=$1 t="$W/synthetic-$1.gtrace"
  [ -s "$t" ] || GPUTRACE_BENCH_EVENTS=$n GPUTRACE_BENCH_REPS=1 GPUTRACE_BENCH_WRITE="$t" \
    cargo bench -q -p gputrace-analyzer --bench report > "$W/synth-$n.txt"
  echo "$t"
}

one() { # side, out-dir, args... -> "wall_s rss_kib" (a failure stops the script)
  local side=$1 out=$2; shift 2
  rm -rf "$out"
  /usr/bin/time -f "%e %M" -o "$W/t" "$W/$side" "$@" > /dev/null 2> "$W/err" \
    || { cat "$W/err" >&2; exit 1; }
  cat "$W/t"
}

measure() { # label, events, file, runs, command args (OUT stands for the output path)...
  local label=$1 n=$2 file=$3 runs=$4; shift 4
  local i side
  for i in $(seq "$runs"); do
    for side in before after; do
      local out="$W/out-$side" args=()
      for a in "$@"; do args+=("${a//OUT/$out}"); done
      read -r wall rss < <(one "$side" "$out" "${args[@]}")
      printf '{"command":"%s","events":%s,"file_bytes":%s,"side":"%s","run":%s,"wall_s":%s,"rss_kib":%s}\n' \
        "$label" "$n" "$(stat -c %s "$file")" "$side" "$i" "$wall" "$rss" >> "$ROWS"
    done
  done
}

for n in $SIZES; do
  t=$(trace_of "$n")
  runs=$RUNS; [ "$n" -gt "$BIG" ] && runs=$BIG_RUNS
  measure report "$n" "$t" "$runs" report "$t"
  measure summary "$n" "$t" "$runs" summary "$t"
  if [ "$n" -le "$EXPORT_MAX" ]; then
    measure perfetto "$n" "$t" "$runs" export --force --format perfetto -o OUT "$t"
    measure parquet "$n" "$t" "$runs" export --force --format parquet -o OUT "$t"
  fi
done
wt="$W/writer.gtrace"
[ -s "$wt" ] || GPUTRACE_BENCH_WRITER_FILE="$wt" cargo bench -q -p gputrace-interpose --bench pipeline > /dev/null
measure report-writer 5400000 "$wt" "$RUNS" report "$wt"

python3 - "$ROWS" "$RESULT" <<'PY'
import json, statistics, sys, datetime, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
g = collections.defaultdict(list)
for r in rows:
    g[(r["command"], r["events"], r["side"])].append(r)
out = {"date": datetime.date.today().isoformat(),
       "machine": "2-core x86_64 VM, 24 GiB, shared (medians of interleaved before/after pairs)",
       "command": "scripts/bench-analyzer.sh", "rows": []}
print(f"{'command':14} {'events':>9} {'side':6} {'wall s':>7} {'M ev/s':>7} {'RSS MiB':>8} {'B/event':>8} {'x file':>7}")
for (cmd, n, side), rs in sorted(g.items(), key=lambda x: (x[0][0], x[0][1], x[0][2] != "before")):
    wall = statistics.median(r["wall_s"] for r in rs)
    rss = statistics.median(r["rss_kib"] for r in rs) * 1024
    fb = rs[0]["file_bytes"]
    row = {"command": cmd, "events": n, "side": side, "runs": len(rs), "wall_s": wall,
           "events_per_s": round(n / wall) if wall else None, "peak_rss_bytes": int(rss),
           "rss_bytes_per_event": round(rss / n, 1), "rss_per_file_byte": round(rss / fb, 2),
           "file_bytes": fb}
    out["rows"].append(row)
    print(f"{cmd:14} {n:>9} {side:6} {wall:>7.2f} {n / wall / 1e6 if wall else 0:>7.2f} {rss / 2**20:>8.1f} {rss / n:>8.1f} {rss / fb:>7.1f}")
json.dump(out, open(sys.argv[2], "w"), indent=1)
PY
