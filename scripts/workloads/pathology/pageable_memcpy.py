"""pageable_memcpy: every step copies a 256 MiB batch from ordinary (pageable) host memory."""
import json, time
import torch

dev = "cuda"
host = torch.randn(64 << 20)  # 256 MiB, pageable
w = torch.randn(4096, 4096, device=dev)
t0 = time.perf_counter()
for step in range(30):
    x = host.to(dev)  # staged by the driver: slow and blocking
    y = (x[: 4096 * 4096].view(4096, 4096) @ w).relu_()
torch.cuda.synchronize()
print(json.dumps({"workload": "pageable_memcpy", "steps": 30, "s": round(time.perf_counter() - t0, 3)}))
