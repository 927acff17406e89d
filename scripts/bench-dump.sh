#!/usr/bin/env bash
# Memory and time of `gputrace dump` on a synthetic training-like trace of N events
# (default 10 M; the analyzer's report bench writes it once and it is kept in $TMPDIR).
# Prints the output size, then the peak RSS and times from /usr/bin/time -v.
#   scripts/bench-dump.sh [EVENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000000}
f=${TMPDIR:-/tmp}/gputrace-dump-bench-$n.gtrace
if [ ! -f "$f" ]; then
  GPUTRACE_BENCH_EVENTS=$n GPUTRACE_BENCH_REPS=1 GPUTRACE_BENCH_WRITE=$f \
    cargo bench -q -p gputrace-analyzer --bench report >/dev/null
fi
cargo build -q --release -p gputrace-analyzer
t=$(mktemp)
/usr/bin/time -v target/release/gputrace dump "$f" 2>"$t" | wc -c
grep -E "Maximum resident|Elapsed|User time|System time|Exit status" "$t"
rm -f "$t"
