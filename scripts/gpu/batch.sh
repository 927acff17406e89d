#!/usr/bin/env bash
# Several GPU checks in one device call: PARTS (comma-separated names of scripts/gpu/*.sh,
# run in order) with their bulky output in $WORK, each part's summary.jsonl written straight
# into $OUT/<part>.jsonl and its folder packed into $OUT/<part>.tgz as soon as it ends, so a
# call cut off by its limit still returns every part that finished. Builds nothing.
#   PARTS=phases,judgement,endings scripts/gpu/batch.sh    (on the device: OUT is set)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
WORK=${WORK:-/tmp/gputrace-batch}; mkdir -p "$WORK"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1
git -C "$ROOT" rev-parse HEAD >>"$OUT/gpu.txt" 2>/dev/null
date -u +%FT%TZ >>"$OUT/gpu.txt"
IFS=, read -r -a parts <<<"${PARTS:-phases,judgement,endings}"
for p in "${parts[@]}"; do
  start=$(date +%s)
  OUT=$WORK SUMMARY=$OUT/$p.jsonl "$ROOT/scripts/gpu/$p.sh" >"$WORK/$p.log" 2>&1
  echo "$p rc=$? $(( $(date +%s) - start )) s" >>"$OUT/gpu.txt"
  # Traces stay behind (too big), but for the parts named in KEEP_TRACES (the gallery's).
  case ",${KEEP_TRACES:-}," in
    *",$p,"*) tar -C "$WORK" -czf "$OUT/$p.tgz" "$p" "$p.log" 2>/dev/null ;;
    *) tar -C "$WORK" -czf "$OUT/$p.tgz" --exclude='*/traces' "$p" "$p.log" 2>/dev/null ;;
  esac
done
for p in "${parts[@]}"; do
  echo "== $p"; tail -n 14 "$WORK/$p/table.txt" 2>/dev/null
done
cat "$OUT/gpu.txt"
