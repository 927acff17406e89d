"""Summarises scripts/bench-overhead.sh runs: overhead.json and a table.

    overhead_summary.py DST RAWDIR [RAWDIR ...]

Each RAWDIR holds one call's per-process results (MODE.jsonl, one JSON line per round)
and trace_size.json; rounds from several calls are pooled. Ratios are the median over
rounds of a mode divided by the median of untraced; min and max are over rounds. The
"_paired" figures are the median over rounds of the ratio within a round (a mode's
process against the untraced process just before it), which cancels slow stretches of
the machine that span a round; "gputrace_over_floor_paired" likewise pairs gputrace with
the CUPTI floor of the same round.
"""
import datetime, json, os, statistics as st, sys

dst, raws = sys.argv[1], sys.argv[2:]
modes = ["untraced", "gputrace", "cupti_floor", "dormant", "torch_profiler"]
# Other modes of scripts/gpu/overhead.sh (parts of the tracer), as found in the folders.
extra = sorted({f[:-6] for d in raws for f in os.listdir(d) if f.endswith(".jsonl")} - set(modes))
modes += extra
data = {m: [] for m in modes}
per_call = []
for d in raws:
    call = {}
    for m in modes:
        p = os.path.join(d, m + ".jsonl")
        call[m] = [json.loads(l) for l in open(p) if l.startswith("{")] if os.path.exists(p) else []
        data[m] += call[m]
    per_call.append(call)
rounds = min(len(v) for v in data.values() if v)


def paired(num, den, key):
    """Per-round ratios of mode num to mode den, rounds paired in order within each call."""
    return [n[key] / d[key] for c in per_call for n, d in zip(c[num], c[den])
            if key in n and key in d and d[key] > 0]


res = {"date": datetime.date.today().isoformat(),
       "machine": "nvidia-h200 (1x H200, driver 580.159.04, torch 2.11.0+cu130); every process pinned to CPUs 2-9",
       "rounds": rounds, "calls": len(raws), "workloads": {}}
# Targets of issue 27, as ratios of per-iteration time (gen: 0.97x the untraced
# tokens/s is 1/0.97 its time per token); launch is against the CUPTI floor.
targets = {"launch": ("gputrace_over_floor_paired", 1.05), "mlp": ("gputrace_paired", 1.01),
           "resnet50": ("gputrace_paired", 1.01), "gen": ("gputrace_paired", 1 / 0.97)}
commits = sorted({open(os.path.join(d, "commit")).read().strip() for d in raws
                  if os.path.exists(os.path.join(d, "commit"))})
if commits:
    res["commit"] = commits if len(commits) > 1 else commits[0]
for wl in ["launch", "launch_min", "mlp", "resnet50", "gen", "loader"]:
    key = wl + "_us"
    base = [d[key] for d in data["untraced"] if key in d]
    if not base:
        continue
    b = st.median(base)
    w = {"untraced_us": b, "untraced_min_max_us": [min(base), max(base)]}
    for m in modes[1:]:
        v = [d[key] for d in data[m] if key in d]
        if v:
            w[m] = st.median(v) / b
            w[m + "_min_max_us"] = [min(v), max(v)]
        pr = paired(m, "untraced", key)
        if pr:
            w[m + "_paired"] = st.median(pr)
    for m in ["gputrace"] + extra:
        pr = paired(m, "cupti_floor", key)
        if pr:
            w[m + "_over_floor_paired"] = st.median(pr)
    if wl in targets:
        k, lim = targets[wl]
        w["target"] = {"of": k, "at_most": round(lim, 4), "met": (w[k] <= lim) if k in w else None}
    res["workloads"][wl] = w
ts = os.path.join(raws[0], "trace_size.json")
if os.path.exists(ts):
    t = json.load(open(ts))
    t["gputrace_bytes_per_gpu_event"] = t["gputrace_bytes"] / max(t["gputrace_gpu_events"], 1)
    if t.get("torch_profiler_json_bytes"):
        t["torch_profiler_bytes_per_gpu_event"] = t["torch_profiler_json_bytes"] / max(t["torch_profiler_gpu_events"], 1)
    res["trace_size"] = t
json.dump(res, open(dst, "w"), indent=1)
print("%d rounds from %d call(s)" % (rounds, len(raws)))
print("%-10s %12s %9s %12s %9s %15s" % ("workload", "untraced", "gputrace", "cupti_floor", "dormant", "torch_profiler"))
for wl, w in res["workloads"].items():
    f = lambda k: ("%.3fx" % w[k]) if k in w else "-"
    print("%-10s %10.1fus %9s %12s %9s %15s" % (wl, w["untraced_us"], f("gputrace"), f("cupti_floor"), f("dormant"), f("torch_profiler")))
    print("%-10s %12s %9s %12s %9s %15s   gputrace/floor %s" % ("  paired", "", f("gputrace_paired"), f("cupti_floor_paired"), f("dormant_paired"), f("torch_profiler_paired"), f("gputrace_over_floor_paired")))
    if "target" in w:
        tg = w["target"]
        print("%-10s target %s <= %.3f: %s" % ("", tg["of"], tg["at_most"], {True: "met", False: "NOT met", None: "not measured"}[tg["met"]]))
# The launch loop by the CPUs its main thread ran on (bench_workload.py's launch_cpus):
# whether a slow state of the machine follows the CPU.
by_cpu = {}
for m in modes:
    for d in data[m]:
        if "launch_cpus" in d and "launch_us" in d:
            by_cpu.setdefault(",".join(map(str, d["launch_cpus"])), []).append("%s %.1f" % (m, d["launch_us"]))
if by_cpu:
    print("launch loop (us) by the main thread's CPUs:")
    for c in sorted(by_cpu):
        print("  cpu %-8s %s" % (c, ", ".join(by_cpu[c])))
t = res.get("trace_size")
if t:
    print("trace bytes/GPU event: gputrace %.1f, torch.profiler JSON %s" % (
        t["gputrace_bytes_per_gpu_event"], round(t.get("torch_profiler_bytes_per_gpu_event") or 0, 1)))
if extra:
    print("\nparts (paired medians: against untraced / against the CUPTI floor of the same round)")
    for wl, w in res["workloads"].items():
        for m in ["cupti_floor", "gputrace"] + extra:
            f = lambda k: ("%.3fx" % w[k]) if k in w else "-"
            if m + "_paired" in w:
                print("%-10s %-14s %9s %9s" % (wl, m, f(m + "_paired"), f(m + "_over_floor_paired")))
