"""A PyTorch job for the hang measurements (scripts/gpu-hang.sh).

    hang_job.py MODE STEPS MARKER

Warms up, measures the GPU's spin rate with torch.cuda._sleep, then runs STEPS steps of
10 `x.add_(1)` kernels and a synchronize each, and prints one JSON line with the number of
add kernels launched so far. Then, by MODE:
  spin     launches one torch.cuda._sleep kernel of about ten minutes, writes MARKER, and
           waits in torch.cuda.synchronize() (until killed);
  abort    launches 50 more add kernels and calls os.abort() without waiting for them;
  healthy  launches a 3-second _sleep kernel, writes MARKER, synchronizes, runs 10 more
           steps, and exits normally.
Every JSON line says `add_launched`, the add kernels launched up to that point.
"""
import json
import os
import sys
import time

import torch

mode, steps, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
x = torch.zeros(1 << 16, device="cuda")
torch.cuda.synchronize()
t = time.time()
torch.cuda._sleep(100_000_000)
torch.cuda.synchronize()
cycles_per_s = 100_000_000 / max(time.time() - t, 1e-6)
launched = 0


def step():
    global launched
    for _ in range(10):
        x.add_(1)
        launched += 1
    torch.cuda.synchronize()


def say(**kw):
    print(json.dumps(dict(add_launched=launched, **kw)), flush=True)


def mark():
    with open(marker, "w") as f:
        f.write(f"{time.time_ns()}\n")


for _ in range(steps):
    step()
say(phase="steps", cycles_per_s=round(cycles_per_s))
if mode == "spin":
    torch.cuda._sleep(int(cycles_per_s * 600))
    mark()
    torch.cuda.synchronize()
    say(phase="spin ended")
elif mode == "abort":
    for _ in range(50):
        x.add_(1)
        launched += 1
    say(phase="abort")
    os.abort()
elif mode == "healthy":
    torch.cuda._sleep(int(cycles_per_s * 3))
    mark()
    torch.cuda.synchronize()
    for _ in range(10):
        step()
    say(phase="done")
