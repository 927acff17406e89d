#!/usr/bin/env bash
# The wheel built on the CPU machine (.whl-gputrace/, `scripts/wheel.sh build`), installed
# with pip --no-index into a fresh venv and used on a PyTorch job: scripts/wheel-gpu-check.sh,
# results in $OUT/wheel/.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT/wheel"
OUT="$OUT/wheel" "$ROOT/scripts/wheel-gpu-check.sh" "$ROOT/.whl-gputrace"
