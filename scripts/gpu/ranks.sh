#!/usr/bin/env bash
# A job of several ranks (issue 40). Builds nothing: target/release/{gputrace,libgputrace.so}
# are carried. scripts/workloads/ranks/ddp.py under `gputrace run -- torchrun
# --nproc-per-node $NPROC` (default: one rank per GPU, NCCL; on one GPU 4 ranks sharing it,
# gloo on CUDA tensors), three ways: balanced, one rank a
# straggler (15 ms of host work before every step), and one rank that stops issuing
# collectives after step 30 (a hang across ranks: --hang-timeout 15s, then SIGINT after 70 s).
# Per case: the ranks' own step times, report.txt/.json, the page (report.html) and the
# traces with the dataset `gputrace run --dataset` wrote (traces.tgz), for `gputrace fleet` here, and
# bundle. One summary line per case appended to $SUMMARY as measured; a table last.
#   OUT=/tmp/o scripts/gpu/ranks.sh            ONLY=straggler,hang NPROC=2
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/ranks; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
W=$ROOT/scripts/workloads/ranks
S=${SUMMARY:-$D/summary.jsonl}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
N=${NPROC:-$([ "$ngpu" -ge 2 ] && echo "$ngpu" || echo 4)}
export PYTHONUNBUFFERED=1
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
nvidia-smi -L >"$D/gpus.txt" 2>&1
for c in balanced straggler hang; do
  case ",${ONLY:-$c}," in *",$c,"*) ;; *) continue ;; esac
  C=$D/$c; mkdir -p "$C"
  case $c in
    balanced) args=(); lim=150; extra=() ;;
    straggler) args=(--slow-rank 1 --slow-ms 15); lim=150; extra=() ;;
    hang) args=(--hang-rank 1 --hang-after 30); lim=70; extra=(--hang-timeout 15s) ;;
  esac
  start=$(date +%s)
  ( cd "$W" && timeout -s INT -k 20 "$lim" "$G" run "${extra[@]}" -o "$C/traces" --dataset "$C/dataset" --job "$c" -- \
      "$PY" -m torch.distributed.run --standalone --nproc-per-node "$N" ddp.py "${args[@]}" ) \
      >"$C/ranks.jsonl" 2>"$C/run.log"
  rc=$?
  took=$(( $(date +%s) - start ))
  "$G" report "$C/traces" >"$C/report.txt" 2>&1
  "$G" report --json --html "$C/report.html" --force "$C/traces" >"$C/report.json" 2>>"$C/report.txt"
  tar -C "$C" -czf "$C/traces.tgz" traces dataset && rm -rf "$C/traces" "$C/dataset"
  "$PY" - "$c" "$C" "$rc" "$took" <<'PYEOF' >>"$S"
import json, sys
c, d, rc, took = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
out = {"case": c, "rc": rc, "wall_s": took, "ranks": []}
for l in open(d + "/ranks.jsonl"):
    try:
        out["ranks"].append(json.loads(l))
    except Exception:
        pass
try:
    r = json.load(open(d + "/report.json"))
    out["top_finding"] = r.get("top_finding")
    out["verdict"] = r.get("verdict", "")[:500]
    out["processes"] = [(p.get("label"), p.get("rank"), (p.get("steps") or {}).get("step_ns_median"),
                         (p.get("kernels") or {}).get("count")) for p in r.get("processes", [])]
    out["findings"] = [(f["id"], f["rank"], round(f["at_stake_pct"], 1)) for f in r.get("findings", [])][:8]
except Exception as e:
    out["error"] = repr(e)
print(json.dumps(out))
PYEOF
  tail -n 1 "$S"
done
"$PY" - "$S" <<'PYEOF' | tee "$D/table.txt"
import json, sys
print(f"{'case':10} {'rc':>4} {'wall':>5}  {'top':18} ranks' own step ms")
for l in open(sys.argv[1]):
    e = json.loads(l)
    own = ", ".join(f"r{x['rank']} {x.get('mean_step_ms', 'hang@' + str(x.get('hang_at_step')))}" for x in e["ranks"])
    print(f"{e['case']:10} {e['rc']:>4} {e['wall_s']:>5}  {str(e.get('top_finding')):18} {own}")
PYEOF
