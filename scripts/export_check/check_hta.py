"""Loads `gputrace export --format chrome` output into Holistic Trace Analysis and runs
its kernel breakdown and idle-time breakdown; prints their numbers next to gputrace's
own and checks that HTA saw the same GPU work.

usage: check_hta.py GPUTRACE TRACE.gtrace OUT_DIR
"""

import collections
import json
import logging
import os
import subprocess
import sys


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def ms(ns):
    return f"{ns / 1e6:.3f} ms"


def main():
    gputrace, trace, out_dir = sys.argv[1:4]
    d = os.path.join(out_dir, "hta-" + os.path.basename(trace).replace(".", "_"))
    os.makedirs(d, exist_ok=True)
    run([gputrace, "export", "--format", "chrome", "-o", os.path.join(d, "rank0.json"), trace])

    # What gputrace says: GPU work from the trace, idle time from the report.
    gpu = collections.Counter()
    gpu_ns = collections.Counter()
    for line in run([gputrace, "dump", trace]).splitlines():
        e = json.loads(line)
        if e["type"] in ("kernel", "memcpy", "memset"):
            gpu[e["type"]] += 1
            gpu_ns[e["type"]] += e["dur_ns"]
    rep = json.loads(run([gputrace, "report", "--json", trace]))
    proc = rep["processes"][0]

    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    a = TraceAnalysis(trace_dir=d)
    types, per_kernel = a.get_gpu_kernel_breakdown(visualize=False)
    idle = a.get_idle_time_breakdown(visualize=False)
    idle = idle[0] if isinstance(idle, tuple) else idle

    hta_total_us = float(types["sum"].sum())
    ours_us = (gpu_ns["kernel"] + gpu_ns["memcpy"] + gpu_ns["memset"]) / 1e3
    n = sum(gpu.values())
    print(f"== {trace}")
    print("HTA kernel breakdown (us):")
    for _, r in types.iterrows():
        print(f"  {r['kernel_type']:<36} {r['sum']:>12.0f}  {r['percentage']:5.1f}%")
    print(
        f"  total {hta_total_us:.0f} us; gputrace: kernels {gpu_ns['kernel'] / 1e3:.0f} us, "
        f"copies {gpu_ns['memcpy'] / 1e3:.0f} us, memsets {gpu_ns['memset'] / 1e3:.0f} us "
        f"= {ours_us:.0f} us ({n} records)"
    )
    print("HTA idle-time breakdown (whole trace, per stream):")
    hta_idle = 0.0
    for _, r in idle.iterrows():
        hta_idle += float(r["idle_time"])
        print(
            f"  stream {r['stream']}: {r['idle_category']:<12} {float(r['idle_time']) / 1e3:10.3f} ms"
            f"  ({float(r['idle_time_ratio']) * 100:.1f}%)"
        )
    print("gputrace idle by cause:")
    for name, b in (("start-up", proc["startup_breakdown"]), ("steady", proc["breakdown"])):
        causes = ", ".join(
            f"{c['cause']} {ms(c['ns'])}" for c in b["causes"] + b["unattributed"]
        )
        print(f"  {name:<9} idle {ms(b['idle_ns'])} of {ms(b['wall_ns'])}: {causes or 'none'}")

    # HTA keeps whole microseconds (start rounded up, end down): up to 2 us per record.
    assert abs(hta_total_us - ours_us) <= 2.0 * n + 1, (hta_total_us, ours_us)
    top = per_kernel.sort_values("sum (us)", ascending=False).head(3)
    print("HTA top kernels: " + "; ".join(
        f"{r['name'][:48]} {r['sum (us)']:.0f} us" for _, r in top.iterrows()
    ))
    ours_top = proc["kernels"]["top"][:3]
    print("gputrace top kernels (steady state): " + "; ".join(
        f"{k['name'][:48]} {k['total_ns'] / 1e3:.0f} us" for k in ours_top
    ))
    assert len(per_kernel) > 0 or gpu["kernel"] == 0, "HTA saw no kernels"
    assert hta_idle > 0 or gpu["kernel"] == 0, "HTA found no idle time"
    print(f"hta ok: {trace}: GPU time {hta_total_us:.0f} us in HTA, {ours_us:.0f} us in gputrace")


if __name__ == "__main__":
    main()
