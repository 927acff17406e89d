"""launch_bound: batch-1 elementwise ops, one tiny kernel each, launched one by one."""
import json, time
import torch

dev = "cuda"
x = torch.randn(1, 64, device=dev)
t0 = time.perf_counter()
for step in range(100):
    for _ in range(100):
        x = x * 0.999 + 0.001
torch.cuda.synchronize()
print(json.dumps({"workload": "launch_bound", "steps": 100, "s": round(time.perf_counter() - t0, 3)}))
