"""One side of the NVML sampler's A/B: the MLP training step (steps.mlp) for --seconds,
timed in blocks of 50 steps; prints one JSON line with the median and fastest block (us
per step). The side (sampler on or off) is the caller's GPUTRACE_NVML_MS."""
import argparse, json, os, time
import torch
import steps

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=4.0)
a = p.parse_args()
torch.manual_seed(0)
step = steps.mlp("cuda")
for _ in range(20):
    step()
torch.cuda.synchronize()
blocks = []
t_end = time.perf_counter() + a.seconds
while time.perf_counter() < t_end:
    t0 = time.perf_counter()
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    blocks.append((time.perf_counter() - t0) / 50 * 1e6)
blocks.sort()
print(json.dumps({"nvml_ms": os.environ.get("GPUTRACE_NVML_MS", "100"), "blocks": len(blocks),
                  "median_us": blocks[len(blocks) // 2], "min_us": blocks[0]}), flush=True)
