"""Overhead benchmark workloads, all three in one process (one process per mode and round).

Prints one JSON line: per-iteration medians (after warm-up) for
  launch: 20 000 x x.add_(1) on a 16-float tensor (us per add_; launch_min: fastest block)
  mlp:    3 x Linear 4096, AdamW, batch 256 (us per step)
  resnet50: torchvision ResNet-50 training step, batch 64, bf16 autocast (us per step)
  gen:    token-by-token generation, batch 1, a small GPT-like model built here
          (us per token, and gen_tok_s: tokens per second)
  loader: a DataLoader training loop (2 workers, pinned, non_blocking; us per step
          of 20 batches)
With --profile FILE the whole run is under torch.profiler (CPU + CUDA), exported to FILE.
With --pin-main CPU the main thread runs on that CPU alone and every other thread of the
process on the rest of the process's CPUs, re-applied before each measured block (a
thread the main thread starts inherits its CPU); the DataLoader loop is left unpinned
(its worker processes would inherit it). On the H200 host, unpinned launch-loop
processes came out in two clusters 40% apart, whatever the mode.
"""
import argparse, json, os, time
import torch
import steps

p = argparse.ArgumentParser()
p.add_argument("--profile", default=None)
p.add_argument("--only", default="launch,mlp,resnet50")
p.add_argument("--launch-reps", type=int, default=10, help="measured blocks of 2000 launches")
p.add_argument("--no-export", action="store_true", help="profile, but skip the (slow) JSON export")
p.add_argument("--pin-main", type=int, default=None, help="run the main thread on this CPU alone")
a = p.parse_args()
ALLOWED = os.sched_getaffinity(0)


def pin(on=True):
    """The main thread on CPU a.pin_main, every other thread on the other CPUs (on), or
    every thread back on all of them (off)."""
    if a.pin_main is None:
        return
    main = {a.pin_main} if on else ALLOWED
    rest = (ALLOWED - {a.pin_main} or ALLOWED) if on else ALLOWED
    me = os.getpid()
    for t in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(t), main if int(t) == me else rest)
        except OSError:
            pass
only = a.only.split(",")
torch.manual_seed(0)
dev = "cuda"
prof = None
if a.profile:
    from torch.profiler import profile, ProfilerActivity
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    prof.__enter__()

def cpu_now():
    """The CPU this thread ran on last (field 39 of its stat), or -1."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def timed(step, n, warm, best=None, pinned=True, cpus=None):
    ts = []
    for i in range(n + warm):
        if i == warm and pinned:
            pin()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= warm:
            ts.append(time.perf_counter() - t0)
            if cpus is not None:
                cpus.add(cpu_now())
    ts.sort()
    if best is not None:
        best.append(ts[0])
    return ts[len(ts) // 2]

out = {}
if "launch" in only:
    x = torch.zeros(16, device=dev)
    def launch():
        for _ in range(2000):
            x.add_(1)
    best, cpus = [], set()
    out["launch_us"] = timed(launch, a.launch_reps, 2, best, cpus=cpus) * 1e6 / 2000
    # Where the main thread ran its measured blocks: processes of one mode fell in two
    # states (7-9 and 10-14 us per launch on the H200 host), perhaps by CPU.
    out["launch_cpus"] = sorted(cpus)
    # The fastest block: interference from the rest of the machine only adds time.
    out["launch_min_us"] = best[0] * 1e6 / 2000
if "mlp" in only:
    out["mlp_us"] = timed(steps.mlp(dev), 30, 5) * 1e6
if "resnet50" in only:
    out["resnet50_us"] = timed(steps.resnet50(dev), 15, 5) * 1e6
if "gen" in only:
    toks = 64
    out["gen_us"] = timed(steps.gpt_generate(dev, toks), 10, 2) * 1e6 / toks
    out["gen_tok_s"] = 1e6 / out["gen_us"]
if "loader" in only:
    pin(False)
    out["loader_us"] = timed(steps.loader_train(dev), 6, 2, pinned=False) * 1e6
if prof is not None:
    prof.__exit__(None, None, None)
if prof is not None and not a.no_export:
    prof.export_chrome_trace(a.profile)
    tr = json.load(open(a.profile))
    out["profiler_gpu_events"] = sum(1 for e in tr.get("traceEvents", []) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
print(json.dumps(out), flush=True)
