#!/usr/bin/env bash
# The first CUDA job on a fresh machine (cold page cache): the greedy-generation workload
# (scripts/workloads/pathology/generation_loop.py) under `gputrace run`, before anything
# else has read the CUDA libraries from disk. Its main thread stalls in page faults as
# kernels are loaded on first use: the report must count them under cpu_bound
# (page_faults), not data_starvation. Run it first in a device call. Builds nothing.
# Results in $OUT/cold-start: the traces, both reports, and the count of the sampler's
# wait samples outside any system call (SYSCALL_NONE) against those in one.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/cold-start; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
( cd "$D" && timeout 120 "$G" run -o "$D/traces" -- "$PY" "$ROOT/scripts/workloads/pathology/generation_loop.py" ) >"$D/run.log" 2>&1
echo "rc=$?" >>"$D/run.log"
"$G" report "$D/traces" >"$D/report.txt" 2>&1
"$G" report --json "$D/traces" >"$D/report.json" 2>>"$D/report.txt"
# The process trace, not the environment file `gputrace run` writes beside it.
for t in "$D"/traces/*.gtrace; do case $t in */gputrace-env-*) ;; *) "$G" dump "$t" ;; esac; done 2>>"$D/run.log" | "$PY" -c '
import json, sys
none = sys_ = 0
for l in sys.stdin:
    if "\"task_wait\"" in l:
        s = json.loads(l).get("syscall")
        if s == 4294967294:
            none += 1
        elif s is not None:
            sys_ += 1
print(json.dumps({"waits_outside_a_syscall": none, "waits_in_a_syscall": sys_}))' >"$D/waits.json"
"$PY" - "$D" <<'PYEOF' | tee "$D/table.txt"
import json, sys
d = sys.argv[1]
r = json.load(open(d + "/report.json"))
f = {x["id"]: x for x in r.get("findings", [])}
host = (r.get("processes") or [{}])[0].get("host_cpu") or {}
print("cold start: top %s; data_starvation %s; cpu_bound %s (%s); page faults %.1f ms; I/O blocked %.1f ms; %s" % (
    r.get("top_finding"), f.get("data_starvation", {}).get("severity", "none"),
    f.get("cpu_bound", {}).get("severity", "none"), f.get("cpu_bound", {}).get("subcause"),
    host.get("page_fault_ns", 0) / 1e6, host.get("io_blocked_ns", 0) / 1e6, open(d + "/waits.json").read().strip()))
PYEOF
