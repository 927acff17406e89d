#!/usr/bin/env bash
# Runs every workload under gputrace and checks the reports against expect.json.
#   scripts/workloads/pathology/run.sh [OUT_DIR]        (GPUTRACE=path/to/gputrace, PY=python3)
#   ONLY=jax_dispatch,healthy scripts/workloads/pathology/run.sh OUT   # those workloads only
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-gputrace-workloads}"
gt="${GPUTRACE:-target/release/gputrace}"
py="${PY:-/opt/torch/.venv/bin/python3}"
mkdir -p "$out"
for w in "$here"/*.py; do
  name="$(basename "$w" .py)"
  [ "$name" = check ] && continue
  case ",${ONLY:-$name}," in *",$name,"*) ;; *) continue ;; esac
  rm -rf "$out/traces-$name"
  echo "== $name" >&2
  # Settings a workload needs (expect.json "env").
  extra=$("$py" -c 'import json,sys; e=json.load(open(sys.argv[1]))["workloads"].get(sys.argv[2],{}).get("env",{}); print(" ".join(k+"="+v for k,v in e.items()))' "$here/expect.json" "$name.py")
  env $extra timeout 120 "$gt" run --summary -o "$out/traces-$name" -- "$py" "$w" > "$out/$name.log" 2>&1
  traces=("$out/traces-$name"/*.gtrace)
  "$gt" report --json "${traces[@]}" > "$out/$name.json" 2>> "$out/$name.log"
  "$gt" report "${traces[@]}" > "$out/$name.txt" 2>> "$out/$name.log"
done
"$py" "$here/check.py" "$out" ${ONLY:+--only "$ONLY"}
