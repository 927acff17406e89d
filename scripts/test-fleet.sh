#!/usr/bin/env bash
# The fleet analysis on both engines (CI runs this after scripts/test.sh): the fleet
# command's tests (cargo test --features fleet), then N-rank datasets
# generated from a real trace (examples/nccl_single_rank.gtrace, one H200 rank with NCCL)
# by scripts/fleet_gen.py, with a known straggler, a rank that stops early (a hang), a
# missing rank and an outlier rank, and the bundled four-rank H200 jobs (examples/ranks_*);
# `gputrace fleet` on the embedded engine and on Apache Spark in local mode
# (scripts/fleet_spark.py, the same SQL) must both find the known answer and give the same
# result. pyspark and pyarrow from PyPI, pinned, into
# target/fleet-venv (made once); Spark needs a JDK 17 (`java`; installed from the system
# packages when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
PINS="pyspark==4.0.1 pyarrow==26.0.1"
VENV=target/fleet-venv
if ! command -v java >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless
fi
. scripts/lib/venv.sh
pinned_venv "$VENV" "$PINS" "fleet checks"
# The fleet command (feature fleet: DataFusion) and its own tests, then the command on
# generated datasets below.
cargo test -p gputrace-analyzer --features fleet --lib --test fleet
cargo build -q -p gputrace-analyzer --features fleet
G=target/debug/gputrace
PY=$VENV/bin/python
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"$G" dataset -o "$OUT/src" --job src examples/nccl_single_rank.gtrace
failed=0
# Generated datasets, then the bundled H200 jobs of four gloo ranks (examples/ranks_*:
# the straggler is rank 1; in the hang, rank 1 never arrived), made datasets here.
"$G" dataset -o "$OUT/ranks_straggler" --job generated examples/ranks_straggler >/dev/null
echo '{"ranks": 4, "helpers": 1, "straggler": 1, "behind": null, "missing": null, "outlier": null}' >"$OUT/ranks_straggler/answers.json"
"$G" dataset -o "$OUT/ranks_hang" --job generated examples/ranks_hang >/dev/null
echo '{"ranks": 4, "helpers": 1, "straggler": null, "behind": {"rank": 1}, "missing": null, "outlier": null}' >"$OUT/ranks_hang/answers.json"
for case in "straggler:--straggler 5" "hang:--behind 3:4" "missing:--missing 6" "outlier:--outlier 2:data_starvation:40" "ranks_straggler:" "ranks_hang:"; do
  name=${case%%:*}; args=${case#*:}
  D=$OUT/$name
  # shellcheck disable=SC2086
  [ -d "$D" ] || "$PY" scripts/fleet_gen.py "$OUT/src" "$D" --ranks 8 $args >/dev/null
  "$G" fleet --json "$D" >"$OUT/$name.embedded.json"
  PATH="$VENV/bin:$PATH" "$VENV/bin/spark-submit" --master "local[2]" scripts/fleet_spark.py "$D" generated \
    --out "$OUT/$name.spark-rows.json" >"$OUT/$name.spark.log" 2>&1 || { tail -20 "$OUT/$name.spark.log"; exit 1; }
  "$G" fleet --json "$D" --results "$OUT/$name.spark-rows.json" >"$OUT/$name.spark.json"
  if "$PY" - "$D/answers.json" "$OUT/$name.embedded.json" "$OUT/$name.spark.json" <<'PYEOF'
import json, sys
want = json.load(open(sys.argv[1]))
a = json.load(open(sys.argv[2]))
b = json.load(open(sys.argv[3]))
ok = True
def check(cond, what):
    global ok
    if not cond:
        ok = False
        print("  FAILED:", what)
if a != b:
    ok = False
    for k in a:
        if a.get(k) != b.get(k):
            print("  FAILED: the engines differ on", k, ":", json.dumps(a.get(k))[:300], "vs", json.dumps(b.get(k))[:300])
check(len(a["ranks"]) == want["ranks"], "ranks %d, want %d" % (len(a["ranks"]), want["ranks"]))
check(len(a.get("helpers", [])) == want.get("helpers", 0), "helpers %s" % a.get("helpers"))
if want["straggler"] is not None:
    check((a["straggler"] or {}).get("rank") == want["straggler"], "straggler %s" % a["straggler"])
if want["behind"]:
    check(a["behind"] and a["behind"][0]["rank"] == want["behind"]["rank"], "behind %s" % a["behind"])
    check(a["verdict"].startswith("Hang: rank %d" % want["behind"]["rank"]), a["verdict"])
if want["missing"] is not None:
    check(a["missing"] and a["missing"][0]["size"] - a["missing"][0]["seen"] == 1, "missing %s" % a["missing"])
if want["outlier"]:
    check(any(o["rank"] == want["outlier"]["rank"] and o["finding"] == want["outlier"]["finding"]
              for o in a["outliers"]), "outliers %s" % a["outliers"])
print("%s: %s | %s" % ("ok" if ok else "FAILED", sys.argv[1].split("/")[-2], a["verdict"][:150]))
sys.exit(0 if ok else 1)
PYEOF
  then :; else failed=$((failed + 1)); fi
done
echo "fleet checks: $failed failed"
[ "$failed" = 0 ]
