#!/usr/bin/env bash
# A before/after pair on the GPU machine, for `gputrace diff`: the pageable_memcpy
# pathology workload and its fixed variant (pinned batch, non_blocking copy), each
# traced, reported, exported for Perfetto, and compared. Builds nothing: it expects
# target/release/gputrace and libgputrace.so built on the CPU machine and carried.
#
#   scripts/gpu-diff.sh            # results under $OUT (default ./gpu-out/diff-pageable-memcpy)
#
# Writes before/ and after/ (the traces), before.json / after.json (reports),
# before.pftrace / after.pftrace (Perfetto), diff.txt and diff.json; prints diff.txt.
# The coordinator commits $OUT as examples/diff-pageable-memcpy/ (traces and diff).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out/diff-pageable-memcpy}
PY=${PY:-$(command -v python3)}
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G="$ROOT/target/release/gputrace"
rm -rf "$OUT"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
run_one() { # name workload
  "$G" run -o "$OUT/$1" -- "$PY" "$2" >"$OUT/$1.out" 2>&1; echo "rc=$?" >>"$OUT/$1.out"
  local t; t=$(ls "$OUT/$1"/*.gtrace | grep -v /gputrace-env- | head -1)
  "$G" report --json "$t" >"$OUT/$1.json" 2>>"$OUT/$1.out"
  "$G" report "$t" >"$OUT/$1.txt" 2>>"$OUT/$1.out"
  "$G" export --format perfetto -o "$OUT/$1.pftrace" "$t" 2>>"$OUT/$1.out"
}
run_one before "$ROOT/scripts/workloads/pathology/pageable_memcpy.py"
run_one after "$ROOT/scripts/workloads/fixed/pageable_memcpy_fixed.py"
B=$(ls "$OUT"/before/*.gtrace | grep -v /gputrace-env- | head -1)
A=$(ls "$OUT"/after/*.gtrace | grep -v /gputrace-env- | head -1)
"$G" diff "$B" "$A" >"$OUT/diff.txt" 2>>"$OUT/after.out"
"$G" diff --json "$B" "$A" >"$OUT/diff.json" 2>>"$OUT/after.out"
cat "$OUT/before.out" "$OUT/after.out"
cat "$OUT/diff.txt"
