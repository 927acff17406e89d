"""dropped_records: a launch-bound loop (tiny in-place elementwise kernels) traced with the
smallest CUPTI buffer pool the library takes (expect.json: GPUTRACE_BUFFER_KB=64,
GPUTRACE_BUFFER_POOL_MB=1: at most 16 buffers of 64 KiB), whose trace writer also falls
behind for STARVE_S seconds (default 1.5) in the middle of the loop, as on a host whose CPUs
are saturated: the library's writer thread ("gputrace-writer") is made SCHED_IDLE and pinned
to one CPU that a spinning, untraced process keeps busy, then put back. The tiny pool alone
loses records (CUPTI's buffer requests refused, CUPTI drops); the starved writer also lets
the per-thread host rings (16384 slots) overflow, so every loss source shows. Measured on an
H100: 76% of records lost (CUPTI 220066, ring 108002, pool 220066); STARVE_S=0: 59% (no ring
overflow). Expected: env_dropped_records at warn. Nothing of the GPU's settings is touched."""
import json, os, subprocess, sys, time
import torch

STARVE_S = float(os.environ.get("STARVE_S", "1.5"))
EDGE_S = 0.5


def writer_tids():
    tids = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().strip() == "gputrace-writer":
                    tids.append(int(t))
        except OSError:
            pass
    return tids


x = torch.zeros(64, device="cuda")
x.mul_(0.999).add_(0.001)
torch.cuda.synchronize()
kernels = 0


def run_for(secs):
    global kernels
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < secs:
        for _ in range(100):
            x.mul_(0.999).add_(0.001)
        kernels += 200


run_for(EDGE_S)
tids = writer_tids()
starved = False
spinner, saved, main_cpus = None, {}, os.sched_getaffinity(0)
try:
    if STARVE_S > 0 and tids and len(main_cpus) > 1:
        cpu = max(main_cpus)
        # The spinner must not be traced: no preload, no injection, tracing off.
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "CUDA_INJECTION64_PATH") and not k.startswith("GPUTRACE_")}
        env["GPUTRACE_MODE"] = "off"
        spinner = subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"], env=env)
        os.sched_setaffinity(spinner.pid, {cpu})
        os.sched_setaffinity(0, main_cpus - {cpu})  # this (main) thread only: keep it off that CPU
        for t in tids:
            saved[t] = os.sched_getaffinity(t)
            os.sched_setaffinity(t, {cpu})
            os.sched_setscheduler(t, os.SCHED_IDLE, os.sched_param(0))
        starved = True
    run_for(STARVE_S)
finally:
    for t, cpus in saved.items():
        try:
            os.sched_setscheduler(t, os.SCHED_OTHER, os.sched_param(0))
            os.sched_setaffinity(t, cpus)
        except OSError:
            pass
    os.sched_setaffinity(0, main_cpus)
    if spinner is not None:
        spinner.kill()
        spinner.wait()
run_for(EDGE_S)
torch.cuda.synchronize()
print(json.dumps({"workload": "dropped_records", "kernels": kernels, "writer_tids": tids,
                  "writer_starved_s": STARVE_S if starved else 0}))
