#!/usr/bin/env bash
# GPUTRACE_DRIVER_API=auto on real programs: whether the driver's launch callbacks were
# switched on (the library's debug line), and how the kernels link to the calls that
# launched them: through a runtime launch, a driver launch, or none (launched by the
# driver before the switch, or not recorded at all). Programs: a JAX loop (XLA launches
# through the driver), torch.compile (Triton kernels through the driver, cuBLAS through
# the runtime), an eager PyTorch MLP (expected: no switch). The JAX loop also with
# GPUTRACE_DRIVER_API=1, for comparison. Builds nothing; uses target/release.
# Results: $OUT/driver-auto/driver-auto.jsonl, one line per run, and a table.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
D=$OUT/driver-auto; mkdir -p "$D"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
G=$ROOT/target/release/gputrace
LIB=$ROOT/target/release/libgputrace.so
W=/tmp/driver-auto; rm -rf "$W"; mkdir -p "$W"
git -C "$ROOT" rev-parse HEAD >"$D/commit" 2>/dev/null || true
one() {  # NAME SETTING SCRIPT [ARGS...]
  local name=$1 setting=$2; shift 2
  env GPUTRACE_DRIVER_API="$setting" GPUTRACE_DEBUG=1 GPUTRACE_DIR="$W/$name" LD_PRELOAD="$LIB" \
    timeout 150 "$PY" "$@" >"$D/$name.log" 2>&1
  local rc=$? t
  t=$(ls -S "$W/$name"/*.gtrace 2>/dev/null | head -1)
  [ -n "$t" ] || { echo "{\"run\": \"$name\", \"rc\": $rc, \"trace\": false}" >>"$D/driver-auto.jsonl"; return; }
  "$G" dump "$t" 2>>"$D/$name.log" | python3 -c '
import json, sys, collections
name, setting, rc, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), open(sys.argv[4]).read()
api, kernels = {}, []
for l in sys.stdin:
    e = json.loads(l)
    if e["type"] == "api":
        api[e["corr"]] = e
    elif e["type"] == "kernel":
        kernels.append(e)
launch = lambda a: a is not None and "Launch" in a["name"] and "Graph" not in a["name"]
by = collections.Counter()
unl_names, unl_zero, drv_names = collections.Counter(), 0, collections.Counter()
first_drv = min((a["ts_ns"] for a in api.values() if a["domain"] == "driver" and launch(a)), default=None)
t0 = min((k["ts_ns"] for k in kernels), default=0)
for k in kernels:
    a = api.get(k["corr"])
    if k.get("graph_id"):
        by["graph"] += 1
    elif launch(a):
        by[a["domain"]] += 1
        if a["domain"] == "driver":
            drv_names[a["name"]] += 1
    elif a is not None:
        by["other_call"] += 1
    else:
        by["unlinked"] += 1
        unl_names[k["name"][:40]] += 1
        unl_zero += k["corr"] == 0
tally = [l for l in log.splitlines() if "driver launch" in l]
print(json.dumps({"run": name, "setting": setting, "rc": rc, "switched": "the program uses the driver API" in log,
                  "kernels": len(kernels), "by_launch": dict(by),
                  "driver_launch_calls": sum(1 for a in api.values() if a["domain"] == "driver" and launch(a)),
                  "unlinked_without_id": unl_zero, "unlinked_names": unl_names.most_common(3),
                  "driver_launch_names": drv_names.most_common(3), "log": tally[-1:],
                  "first_driver_launch_s": None if first_drv is None else round((first_drv - t0) / 1e9, 3)}))
' "$name" "$setting" "$rc" "$D/$name.log" >>"$D/driver-auto.jsonl"
  tail -1 "$D/driver-auto.jsonl"
}
one jax_auto auto "$ROOT/scripts/workloads/pathology/jax_dispatch.py"
one jax_on 1 "$ROOT/scripts/workloads/pathology/jax_dispatch.py"
one compile_auto auto "$ROOT/scripts/workloads/validate/compile_loop.py"
one eager_auto auto "$ROOT/scripts/workloads/validate/torch_train.py" --steps 200
one matmul_auto auto "$ROOT/scripts/workloads/pathology/healthy.py"
one matmul_on 1 "$ROOT/scripts/workloads/pathology/healthy.py"
python3 - "$D/driver-auto.jsonl" <<'PY'
import json, sys
print("%-13s %-5s %-8s %8s  %s" % ("run", "set", "switched", "kernels", "kernels by the call that launched them"))
for l in open(sys.argv[1]):
    d = json.loads(l)
    print("%-13s %-5s %-8s %8s  %s  driver launch calls %s, first at %s s" % (d["run"], d.get("setting", "-"), d.get("switched"), d.get("kernels", "-"), d.get("by_launch"), d.get("driver_launch_calls"), d.get("first_driver_launch_s")))
    print("    unlinked: %s without an id, names %s; driver launches %s; %s" % (d.get("unlinked_without_id"), d.get("unlinked_names"), d.get("driver_launch_names"), d.get("log")))
PY
