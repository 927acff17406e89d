#!/usr/bin/env bash
# The quick validation of this build (scripts/gpu-validate.sh with QUICK=1: PyTorch kernel
# count against torch.profiler, a profiler window, NCCL, copies, a production window),
# results in $OUT/validate/.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT/validate"
QUICK=1 OUT="$OUT/validate" "$ROOT/scripts/gpu-validate.sh"
