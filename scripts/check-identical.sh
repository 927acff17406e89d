#!/usr/bin/env bash
# Proves that the analyzer's outputs of the bundled examples have not changed: for every
# examples/*.gtrace file and every example directory, `gputrace dump` (each trace of a
# directory), `report --json`, `report`, `summary --json` and `export --format
# perfetto|chrome|parquet` are regenerated and their sha256 sums compared with
# tests/golden/outputs.sha256. A change of the trace codec, the loader or an exporter
# that changes a byte of any of them fails here.
#
#   scripts/check-identical.sh            build the analyzer (debug), compare
#   scripts/check-identical.sh --update   rewrite the sums (an intended output change)
#
# The sums are of the debug build (what scripts/test.sh builds). GPUTRACE=path uses
# another binary; a release build writes other Perfetto bytes (the same trace): the
# Perfetto exporter interns static names by address, and the optimiser merges equal
# string literals.
set -euo pipefail
cd "$(dirname "$0")/.."
SUMS=tests/golden/outputs.sha256
update=0
[ "${1:-}" = "--update" ] && update=1
if [ -z "${GPUTRACE:-}" ]; then
  # The workspace, as scripts/test.sh builds it (the same features: nothing rebuilt).
  cargo build -q --workspace
  GPUTRACE=target/debug/gputrace
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# One output: its name under $OUT/got, the command's stdout (exit status kept: a
# report of a damaged trace may exit non-zero on purpose).
run() {
  local name=$1; shift
  local rc=0
  "$GPUTRACE" "$@" > "$OUT/got/$name" 2> /dev/null || rc=$?
  echo "$rc" > "$OUT/got/$name.rc"
}

mkdir -p "$OUT/got"
for input in examples/*.gtrace examples/*/; do
  input=${input%/}
  n=$(echo "$input" | tr '/' '_')
  if [ -d "$input" ]; then
    for t in "$input"/*.gtrace; do
      run "$(echo "$t" | tr '/' '_').dump" dump "$t"
    done
    # A directory with its own saved inputs (before/after runs): the traces under it.
    set -- $(find "$input" -name '*.gtrace' | sort)
  else
    run "$n.dump" dump "$input"
    set -- "$input"
  fi
  [ $# -gt 0 ] || continue
  run "$n.report.json" report --json "$@"
  run "$n.report.txt" report "$@"
  run "$n.summary.json" summary --json "$@"
  # The summary's maps are written in hash order: compared with their keys sorted.
  python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin), sort_keys=True, indent=1))' \
    < "$OUT/got/$n.summary.json" > "$OUT/sorted" 2> /dev/null && mv "$OUT/sorted" "$OUT/got/$n.summary.json"
  for f in perfetto chrome parquet; do
    mkdir -p "$OUT/x/$n.$f"
    run "$n.export.$f.log" export --format "$f" -o "$OUT/x/$n.$f/out" "$@"
    # Every file the export wrote, by its path under the output.
    (cd "$OUT/x/$n.$f" && find . -type f | sort | while read -r p; do
      cp "$p" "$OUT/got/$n.export.$f$(echo "${p#./out}" | tr '/' '_')"
    done)
  done
done

(cd "$OUT/got" && sha256sum -- * | LC_ALL=C sort -k2) > "$OUT/sums"
if [ "$update" = 1 ]; then
  mkdir -p "$(dirname "$SUMS")"
  cp "$OUT/sums" "$SUMS"
  echo "check-identical: $(wc -l < "$SUMS") outputs recorded in $SUMS"
  exit 0
fi
if diff -u "$SUMS" "$OUT/sums" > "$OUT/diff"; then
  echo "check-identical: $(wc -l < "$SUMS") outputs identical"
else
  echo "check-identical: outputs differ from $SUMS:"
  grep '^[-+][0-9a-f]' "$OUT/diff" || cat "$OUT/diff"
  exit 1
fi
