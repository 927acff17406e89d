"""Runs one workload under `gputrace run` and measures what NVML GPM gave, for
scripts/gpu-gpm.sh.

  python3 measure.py GPUTRACE OUT_DIR NAME GPM_MS TIMEOUT_S -- CMD...

Runs `GPUTRACE run -o OUT_DIR/NAME -- CMD` with GPUTRACE_GPM_MS=GPM_MS; while it runs,
reads the CPU time of the command's GPM and NVML sampler threads (`gputrace-gpm`,
`gputrace-env`, from /proc/PID/task/*/stat: their own time, not the job's). Then reads
the environment file's counter samples (`gputrace dump`) and the report (`gputrace report
--json`, also kept as report.txt), and appends one JSON line to OUT_DIR/summary.jsonl:
the samples (count, intervals: median, p10, p90, max, spread; how many lack a core
metric), the sampler threads' CPU ms per second of run, the report's measured values
(steady state, top kernels), its estimate from grid sizes, and its top finding with
memory_bound's DRAM %.
"""
import glob
import json
import os
import statistics
import subprocess
import sys
import time

CLK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid):
    """CPU seconds of each named thread of `pid` ({comm: s})."""
    out = {}
    for st in glob.glob(f"/proc/{pid}/task/*/stat"):
        try:
            s = open(st).read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        out[comm] = (int(f[11]) + int(f[12])) / CLK
    return out


def quantile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] if v else None


def main():
    gt, out_dir, name, gpm_ms, timeout_s = sys.argv[1:6]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    env = dict(os.environ, GPUTRACE_GPM_MS=gpm_ms)
    log = open(os.path.join(d, "log"), "w")
    t0 = time.monotonic()
    p = subprocess.Popen([gt, "run", "-o", d, "--", *cmd], stdout=log, stderr=log, env=env)
    cpu = {}
    while p.poll() is None:
        if time.monotonic() - t0 > float(timeout_s):
            p.kill()
            break
        now = thread_cpu(p.pid)
        for k in ("gputrace-gpm", "gputrace-env"):
            if k in now:
                cpu[k] = now[k]
        time.sleep(0.2)
    rc = p.wait()
    wall = time.monotonic() - t0
    files = sorted(glob.glob(os.path.join(d, "*.gtrace")))
    envs = [f for f in files if os.path.basename(f).startswith("gputrace-env-")]
    row = {"workload": name, "gpm_ms": int(gpm_ms), "rc": rc, "wall_s": round(wall, 1),
           "sampler_cpu_ms_per_s": {k: round(1000 * v / wall, 2) for k, v in cpu.items()}}
    if envs:
        lines = subprocess.run([gt, "dump", envs[0]], capture_output=True, text=True).stdout
        cs, facts = [], {}
        for line in lines.splitlines():
            r = json.loads(line)
            if r.get("type") == "counter_sample":
                cs.append(r)
            elif r.get("type") == "fact" and r.get("key") == "gpm":
                facts[str(r.get("device"))] = r.get("value")
        iv = [r["dur_ns"] / 1e6 for r in cs]
        core = ("sm_active_pct", "occupancy_pct", "tensor_active_pct", "dram_pct")
        row["gpm_fact"] = facts
        row["samples"] = {
            "n": len(cs),
            "lacking_core_metric": sum(1 for r in cs if any(k not in r for k in core)),
            "interval_ms_median": quantile(iv, 0.5),
            "interval_ms_p10": quantile(iv, 0.1),
            "interval_ms_p90": quantile(iv, 0.9),
            "interval_ms_max": max(iv) if iv else None,
            "interval_spread_pct": round(100 * statistics.pstdev(iv) / statistics.mean(iv), 1)
            if len(iv) > 1 else None,
        }
    if files:
        rep = subprocess.run([gt, "report", "--json", *files], capture_output=True, text=True)
        txt = subprocess.run([gt, "report", *files], capture_output=True, text=True)
        open(os.path.join(d, "report.txt"), "w").write(txt.stdout)
        open(os.path.join(d, "report.json"), "w").write(rep.stdout)
        try:
            r = json.loads(rep.stdout)
            procs = r.get("processes") or []
            p0 = max(procs, key=lambda p: p["steady"]["wall_ns"]) if procs else {}
            mb = [f for f in r.get("findings", []) if f["id"] == "memory_bound"]
            row["report"] = {
                "top_finding": r.get("top_finding"),
                "findings": [(f["id"], f["severity"]) for f in r.get("findings", [])],
                "memory_bound_dram_pct": mb[0]["metrics"].get("dram_pct") if mb else None,
                "gpu_util_pct": p0.get("gpu_util_pct"),
                "sm_fill_estimate_pct": p0.get("sm_fill_pct"),
                "measured": p0.get("measured"),
                "measured_kernels": (p0.get("measured_kernels") or [])[:3],
            }
        except (ValueError, KeyError) as e:
            row["report_error"] = str(e)
    with open(os.path.join(out_dir, "summary.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row)[:400])


if __name__ == "__main__":
    main()
