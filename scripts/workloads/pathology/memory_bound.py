"""memory_bound: a loop of elementwise kernels on a 2 GiB tensor, each limited by DRAM
bandwidth (the GPU is "busy" the whole time while its math pipes idle). SECONDS_LOOP in the
environment sets the loop's length (default 3)."""
import json, os, time
import torch

secs = float(os.environ.get("SECONDS_LOOP", "3"))
x = torch.ones(1 << 29, device="cuda")  # 2 GiB of float32
x.mul_(1.0001)
torch.cuda.synchronize()
t0 = time.perf_counter()
n = 0
while time.perf_counter() - t0 < secs:
    for _ in range(20):
        x.mul_(1.0001)
    torch.cuda.synchronize()
    n += 20
s = time.perf_counter() - t0
print(json.dumps({"workload": "memory_bound", "steps": n, "s": round(s, 3),
                  "ms_per_kernel": round(1000 * s / n, 4),
                  "tb_per_s": round(2 * x.numel() * 4 * n / s / 1e12, 2)}))
