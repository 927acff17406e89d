"""oom: a training-like loop that keeps every step's output alive (appended to a list,
as `losses.append(loss)` without `.item()` does) until the CUDA caching allocator's
cudaMalloc fails and torch.cuda.OutOfMemoryError ends the job with status 1. Each
step keeps STEP_MIB of activations (default 1024). Prints one JSON line per step."""
import json, os, time
import torch

step_mib = int(os.environ.get("STEP_MIB", "1024"))
n = step_mib * 1024 * 1024 // 4 // 4096
w = torch.randn(4096, 4096, device="cuda")
kept = []
t0 = time.perf_counter()
for step in range(100000):
    x = torch.randn(n, 4096, device="cuda")
    y = torch.relu(x @ w)          # the step's activation, kept alive below
    kept.append(y)
    torch.cuda.synchronize()
    print(json.dumps({"step": step, "t": round(time.perf_counter() - t0, 3),
                      "allocated_gib": round(torch.cuda.memory_allocated() / 2**30, 2)}),
          flush=True)
