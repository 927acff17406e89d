#!/usr/bin/env bash
# The export round trips (CI runs this after scripts/test.sh): gputrace's Perfetto,
# Chrome JSON and Parquet exports of the bundled examples read back by other people's
# tools, installed from PyPI at pinned versions into a virtual environment under
# target/ (made once, reused while the pins stay the same):
# - Perfetto's own proto definitions (perfetto_trace_pb2) decode the Perfetto trace;
# - Holistic Trace Analysis runs its kernel and idle-time breakdowns on the Chrome JSON;
# - pyarrow reads the Parquet tables and answers idle time by cause per rank;
# - the sampler counters (host CPU %, NVML readings) of each bundled process trace with
#   its environment file, read back from Perfetto and Parquet, against the samples.
set -euo pipefail
cd "$(dirname "$0")/.."
PINS="perfetto==0.59.1 protobuf==7.36.2 HolisticTraceAnalysis==0.5.0 pyarrow==26.0.1"
VENV=target/export-venv
. scripts/lib/venv.sh
pinned_venv "$VENV" "$PINS" "export checks"
cargo build -p gputrace-analyzer
G=target/debug/gputrace
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
passed=0 failed=0
check() {
  if "$VENV/bin/python" "$@" > "$OUT/log" 2>&1; then
    passed=$((passed + 1)); grep -E "^(perfetto|hta|parquet|counters) ok|^(==|HTA|gputrace|  )" "$OUT/log" || true
  else
    failed=$((failed + 1)); echo "FAILED: $*"; tail -20 "$OUT/log"
  fi
}
for f in examples/*.gtrace; do
  check scripts/export_check/check_perfetto.py "$G" "$f" "$OUT"
done
for f in examples/torch-mlp.gtrace examples/pageable_memcpy.gtrace examples/data_starvation.gtrace; do
  check scripts/export_check/check_hta.py "$G" "$f" "$OUT"
done
if [ -f scripts/export_check/check_parquet.py ]; then
  check scripts/export_check/check_parquet.py "$G" "$OUT" examples/*.gtrace
fi
# The directories of one process trace and its environment file (`gputrace run`'s pair;
# examples/recompile also holds its compile worker's trace).
for d in examples/*/; do
  envs=$(ls "$d"gputrace-env-*.gtrace 2>/dev/null | wc -l || true)
  procs=$(ls "$d"*.gtrace 2>/dev/null | grep -vc "/gputrace-env-" || true)
  if [ "$envs" = 1 ] && [ "$procs" = 1 ]; then
    check scripts/export_check/check_counters.py "$G" "$OUT" "$d"
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
