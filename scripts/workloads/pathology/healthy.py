"""healthy: large bf16 matmuls back to back, no host syncs in the loop: GPU-bound."""
import json, time
import torch

dev = "cuda"
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
c = torch.empty_like(a)
t0 = time.perf_counter()
for step in range(300):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
print(json.dumps({"workload": "healthy", "steps": 300, "s": round(time.perf_counter() - t0, 3)}))
