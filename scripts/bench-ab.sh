#!/usr/bin/env bash
# The analyzer's speed and peak memory, two builds side by side on the benchmark's
# synthetic traces (analyzer/benches/report.rs): report, summary and each export, at each
# size, in interleaved A/B pairs (ROUNDS), medians. Writes bench/analyzer-ab.json.
#
#   OLD=path/to/gputrace NEW=target/release/gputrace scripts/bench-ab.sh
#   SIZES="1000000 10000000 50000000" ROUNDS=3 BIG_CMDS="report summary"   (the defaults)
#
# Commands at the largest size are BIG_CMDS only (the exports take minutes there).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${OLD:?the earlier build}
NEW=${NEW:-target/release/gputrace}
SIZES=${SIZES:-"1000000 10000000 50000000"}
ROUNDS=${ROUNDS:-3}
BIG_CMDS=${BIG_CMDS:-"report summary"}
CMDS="report summary perfetto parquet chrome"
W=${W:-/tmp/gputrace-bench-ab}
mkdir -p "$W"
largest=$(echo $SIZES | tr ' ' '\n' | sort -n | tail -1)
: >"$W/times.txt"
for n in $SIZES; do
  t="$W/$n.gtrace"
  [ -s "$t" ] || GPUTRACE_BENCH_EVENTS=$n GPUTRACE_BENCH_REPS=1 GPUTRACE_BENCH_WRITE="$t" \
    cargo bench -q -p gputrace-analyzer --bench report >"$W/synth-$n.txt" 2>&1
  cmds=$CMDS
  [ "$n" = "$largest" ] && [ "$n" != "$(echo $SIZES | cut -d' ' -f1)" ] && cmds=$BIG_CMDS
  for r in $(seq "$ROUNDS"); do
    for c in $cmds; do
      for v in old new; do
        b=$OLD; [ $v = new ] && b=$NEW
        case $c in
          report|summary) args=("$c" "$t") ;;
          *) args=(export --force --format "$c" -o "$W/out.$c" "$t") ;;
        esac
        /usr/bin/time -f "$n $c $v %e %M" -a -o "$W/times.txt" "$b" "${args[@]}" >/dev/null 2>"$W/err.txt" || {
          echo "$b ${args[*]} failed:"; cat "$W/err.txt"; exit 1; }
        rm -rf "$W/out.$c"
      done
    done
  done
done
python3 - "$W/times.txt" "$OLD" "$NEW" <<'PY'
import json, statistics as st, sys, platform, os, datetime
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
out = {"date": datetime.date.today().isoformat(),
       "machine": f"{os.cpu_count()}-core {platform.machine()} CPU VM",
       "command": "scripts/bench-ab.sh", "old": sys.argv[2], "new": sys.argv[3],
       "note": "wall s and peak RSS MiB, medians of interleaved old/new runs; exports include the analysis",
       "results": []}
keys = sorted({(int(r[0]), r[1]) for r in rows})
print(f"{'events':>10} {'command':8} {'old s':>7} {'new s':>7} {'old MiB':>8} {'new MiB':>8} {'new Mev/s':>9} {'new B/ev':>8}")
for n, c in keys:
    d = {}
    for v in ("old", "new"):
        w = [float(r[3]) for r in rows if int(r[0]) == n and r[1] == c and r[2] == v]
        m = [int(r[4]) / 1024 for r in rows if int(r[0]) == n and r[1] == c and r[2] == v]
        d[v] = {"wall_s": round(st.median(w), 3), "peak_rss_mib": round(st.median(m), 1), "runs": len(w)}
    e = {"events": n, "command": c, **d,
         "new_events_per_s": round(n / d["new"]["wall_s"]),
         "new_bytes_per_event": round(d["new"]["peak_rss_mib"] * 1048576 / n, 1)}
    out["results"].append(e)
    print(f"{n:>10} {c:8} {d['old']['wall_s']:>7.2f} {d['new']['wall_s']:>7.2f} {d['old']['peak_rss_mib']:>8.0f} {d['new']['peak_rss_mib']:>8.0f} {e['new_events_per_s']/1e6:>9.2f} {e['new_bytes_per_event']:>8.1f}")
json.dump(out, open("bench/analyzer-ab.json", "w"), indent=1)
PY
