#!/usr/bin/env bash
# The pathology suite under `gputrace run`, checked against expect.json
# (scripts/workloads/pathology/run.sh); ONLY=a,b runs those workloads alone. Builds
# nothing: target/release/gputrace and libgputrace.so next to it. Reports, logs and the
# check's table in $OUT/suite; the traces are left out (too big to bring back).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/suite; mkdir -p "$D"
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
GPUTRACE=$ROOT/target/release/gputrace "$ROOT/scripts/workloads/pathology/run.sh" "$D" 2>&1 | tee "$D/check.txt"
rm -rf "$D"/traces-*
