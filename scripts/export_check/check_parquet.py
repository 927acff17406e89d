"""Reads `gputrace export --format parquet` tables of several traces with pyarrow and
answers one real question with them, idle time by cause per rank in the steady state,
checked against `gputrace report --json` of the same traces; row counts against the
traces themselves (`gputrace dump`).

usage: check_parquet.py GPUTRACE OUT_DIR TRACE...
"""

import collections
import json
import os
import subprocess
import sys

import pyarrow.compute as pc
import pyarrow.parquet as pq


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def main():
    gputrace, out_dir, traces = sys.argv[1], sys.argv[2], sys.argv[3:]
    d = os.path.join(out_dir, "parquet")
    run([gputrace, "export", "--format", "parquet", "-o", d, *traces])
    tables = {f[:-8]: pq.read_table(os.path.join(d, f)) for f in os.listdir(d)}
    for name in ("kernels", "copies", "api_calls", "nccl_calls", "nvtx", "idle_gaps", "steps", "findings"):
        t = tables[name]
        for col in ("rank", "host", "pid"):
            assert col in t.column_names, f"{name} has no {col}"

    # The question: idle time by cause per rank (here: per process) in the steady state.
    idle = tables["idle_gaps"]
    steady = idle.filter(pc.equal(idle["phase"], "steady"))
    by = steady.group_by(["rank", "host", "pid", "cause"]).aggregate([("dur_ns", "sum")])
    answer = collections.defaultdict(dict)
    for r in by.to_pylist():
        answer[(r["rank"], r["host"], r["pid"])][r["cause"]] = r["dur_ns_sum"]

    rep = json.loads(run([gputrace, "report", "--json", *traces]))
    seen = set()
    checked = 0
    print("steady-state idle time by cause per process (ms), from idle_gaps.parquet:")
    for i, p in enumerate(rep["processes"]):
        # The pid as exported: a pid another process of the set had first is made unique.
        pid = p["pid"] if p["pid"] not in seen else (1 << 22) + i
        seen.add(p["pid"])
        key = (p["rank"] if p["rank"] is not None else -1, p["host"], pid)
        b = p["breakdown"]
        want = {c["cause"]: c["ns"] for c in b["causes"] + b["unattributed"]}
        got = answer.get(key, {})
        print(
            f"  {p['label']:<22} "
            + ", ".join(f"{c} {v / 1e6:.3f}" for c, v in sorted(got.items(), key=lambda x: -x[1]))
        )
        if len(p["devices"]) <= 1:
            assert got == want, f"{p['label']}: parquet {got}, report {want}"
            checked += 1

    # Row counts against the traces.
    kinds = collections.Counter()
    for t in traces:
        for line in run([gputrace, "dump", t]).splitlines():
            kinds[json.loads(line)["type"]] += 1
    assert tables["kernels"].num_rows == kinds["kernel"], (tables["kernels"].num_rows, kinds["kernel"])
    assert tables["copies"].num_rows == kinds["memcpy"] + kinds["memset"]
    assert tables["api_calls"].num_rows >= kinds["api"]
    assert tables["nccl_calls"].num_rows == kinds["nccl"] + kinds["nccl_comm"]
    assert tables["findings"].num_rows == len(rep["findings"])
    steps = sum(p["steps"]["count"] for p in rep["processes"])
    assert tables["steps"].num_rows == steps, (tables["steps"].num_rows, steps)
    print(
        f"parquet ok: {len(traces)} traces: {tables['kernels'].num_rows} kernels, "
        f"{tables['copies'].num_rows} copies, {tables['api_calls'].num_rows} API calls, "
        f"{tables['nccl_calls'].num_rows} NCCL calls, {tables['nvtx'].num_rows} NVTX rows, "
        f"{idle.num_rows} idle pieces; idle by cause = report's for {checked} processes"
    )


if __name__ == "__main__":
    main()
