"""Shared by the judgement workloads: the variant from argv, step timing, one JSON line."""
import json, statistics, sys, time

import torch

FIXED = "--fixed" in sys.argv


def timed_loop(name, step, steps, warmup=20, group=10):
    """Runs `step` `warmup` times, then `steps` times, synchronising after every `group`
    steps (1: after each, as a server answering requests does); prints the median step time
    over the groups. The same in both variants, so only the cause differs."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    t0 = time.perf_counter()
    for _ in range(steps // group):
        a = time.perf_counter()
        for _ in range(group):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - a) / group)
    wall = time.perf_counter() - t0
    print(json.dumps({"workload": name, "variant": "fixed" if FIXED else "original", "steps": steps,
                      "step_ms_median": round(1e3 * statistics.median(times), 4),
                      "loop_s": round(wall, 3)}), flush=True)
