#!/usr/bin/env python3
"""The report's phases against a workload's own marks (scripts/workloads/phases/marks.py).

    scripts/phase-marks.py TRACES MARKS.jsonl [--gputrace BIN] [--json]

Runs `gputrace report --json TRACES`, takes the process with the most kernels, and prints
per marked kind: the script's time, the report's time for that kind, the error, and how
the marked time was labelled by the report (an overlap matrix on the trace's clock), so a
wrong boundary shows where it is. Marks before the trace started are clipped to it.
"""
import argparse
import json
import subprocess
import sys

NAMES = {"start-up": "start_up", "epoch-boundary": "epoch_boundary"}


def report(bin_, traces):
    out = subprocess.run([bin_, "report", "--json", traces], capture_output=True, text=True)
    if not out.stdout.strip():
        sys.exit("gputrace report failed: " + out.stderr.strip()[:400])
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces")
    ap.add_argument("marks")
    ap.add_argument("--gputrace", default="target/release/gputrace")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = report(a.gputrace, a.traces)
    ps = r.get("processes") or []
    if not ps:
        sys.exit("no process in the report")
    p = max(ps, key=lambda p: (p.get("kernels") or {}).get("count", 0))
    t0 = p["trace_start_ns"]
    run = p.get("run") or {}
    phases = [(x["kind"], x["start_ns"] + t0, x["end_ns"] + t0) for x in run.get("phases", [])]
    by_kind = {k["kind"]: k["ns"] for k in run.get("by_kind", [])}
    marks = []
    for line in open(a.marks):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if "mark" in e:
            marks.append((NAMES.get(e["mark"], e["mark"]), max(e["start"], t0), e["end"]))
    script, matrix = {}, {}
    for kind, s, e in marks:
        if e <= s:
            continue
        script[kind] = script.get(kind, 0) + (e - s)
        row = matrix.setdefault(kind, {})
        covered = 0
        for pk, ps_, pe in phases:
            o = min(e, pe) - max(s, ps_)
            if o > 0:
                row[pk] = row.get(pk, 0) + o
                covered += o
        if e - s > covered:
            row["(outside)"] = row.get("(outside)", 0) + (e - s - covered)
    res = {
        "kinds": {
            k: {
                "script_s": round(v / 1e9, 3),
                "report_s": round(by_kind.get(k, 0) / 1e9, 3),
                "error_pct": round(100 * (by_kind.get(k, 0) - v) / v, 1),
                "labelled_s": {pk: round(o / 1e9, 3) for pk, o in sorted(matrix[k].items(), key=lambda x: -x[1])},
            }
            for k, v in script.items()
        },
        "report_only": {k: round(v / 1e9, 3) for k, v in by_kind.items() if k not in script},
        "recompiles": run.get("recompiles"),
    }
    if a.json:
        print(json.dumps(res))
        return
    print("%-15s %9s %9s %7s  labelled by the report" % ("mark", "script s", "report s", "error"))
    for k, v in res["kinds"].items():
        lab = ", ".join("%s %.3f" % kv for kv in v["labelled_s"].items())
        print("%-15s %9.3f %9.3f %6.1f%%  %s" % (k, v["script_s"], v["report_s"], v["error_pct"], lab))
    if res["report_only"]:
        print("report only:", ", ".join("%s %.3f s" % kv for kv in res["report_only"].items()))


if __name__ == "__main__":
    main()
