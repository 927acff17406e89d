"""pageable_memcpy, fixed: the same 30 steps (a 256 MiB batch copied to the GPU, then a
4096 x 4096 matmul), the batch now in pinned host memory and copied with
non_blocking=True, as the pageable_memcpy finding advises. `gputrace diff` of this run
against scripts/workloads/pathology/pageable_memcpy.py shows what the fix bought."""
import json, time
import torch

dev = "cuda"
host = torch.randn(64 << 20).pin_memory()  # 256 MiB, pinned
w = torch.randn(4096, 4096, device=dev)
t0 = time.perf_counter()
for step in range(30):
    x = host.to(dev, non_blocking=True)  # DMA straight from pinned memory, asynchronous
    y = (x[: 4096 * 4096].view(4096, 4096) @ w).relu_()
torch.cuda.synchronize()
print(json.dumps({"workload": "pageable_memcpy_fixed", "steps": 30, "s": round(time.perf_counter() - t0, 3)}))
